package testenv

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// Proxied is an Env whose nodes live on a cluster of the test's choosing and are registered
// through a fault-injecting proxy in front of it: the test makes a worker's statements fail,
// stall or lose their connection with Proxy's rules. NodeExec, NodeConn, TableExists and
// Snapshot reach the nodes directly, past the proxy.
type Proxied struct {
	*Env
	NodeCluster *pgcluster.Cluster // where the nodes' databases are
	Proxy       *pgtest.Proxy      // in front of NodeCluster, closed when the test ends
}

// NewProxied creates an Env (see New) whose nodes will live on nodes, behind a new proxy.
func NewProxied(t testing.TB, nodes *pgcluster.Cluster, features ...engine.Feature) *Proxied {
	t.Helper()
	return &Proxied{Env: New(t, features...), NodeCluster: nodes, Proxy: pgtest.ProxyTo(t, nodes)}
}

// Node creates a database on the node cluster and registers it, through the proxy, as node
// name (as the superuser, with room for 8 tasks). It returns the database name.
func (e *Proxied) Node(name string) string {
	e.T.Helper()
	db := Database(e.T, e.NodeCluster, name)
	node := deckhandtype.Node{Name: name, DSN: e.Proxy.DSN(db, pgcluster.Superuser), MaxTasks: 8}
	if err := e.Client.AddNode(context.Background(), node); err != nil {
		e.T.Fatal(err)
	}
	return db
}

// NodeExec runs SQL as the superuser in database db of the node cluster.
func (e *Proxied) NodeExec(db, sql string, args ...any) {
	e.T.Helper()
	e.execOn(e.NodeCluster, db, sql, args...)
}

// NodeConn connects to database db of the node cluster as user, until the test ends.
func (e *Proxied) NodeConn(db, user string) *pgx.Conn {
	e.T.Helper()
	return pgtest.Connect(e.T, e.NodeCluster.DSN(db, user))
}

// NodePool is the test's pool of superuser connections to database db of the node cluster
// (the same one on every call), closed at cleanup. Helpers that tests call many times, and
// poll with, take a connection from it: a new session costs the server tens of milliseconds
// of CPU, so polling with one every few milliseconds would keep a small machine's cores busy
// opening sessions while the operation waited on is starved.
func (e *Proxied) NodePool(db string) *pgxpool.Pool {
	e.T.Helper()
	return e.poolOn(e.NodeCluster, db)
}

// TableExists reports whether table (resolved on the default search_path) is in database db
// of the node cluster.
func (e *Proxied) TableExists(db, table string) bool {
	e.T.Helper()
	ctx := context.Background()
	var ok bool
	if err := e.NodePool(db).QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		e.T.Fatal(err)
	}
	return ok
}

// Snapshot is what database db of the node cluster holds that an operation could leave
// behind: relations, schemas, publications, subscriptions and replication slots, and a digest
// of the rows of each of tables that exists. Compare two with Diff.
func (e *Proxied) Snapshot(db string, tables ...string) []string {
	e.T.Helper()
	ctx := context.Background()
	conn, err := e.NodePool(db).Acquire(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	defer conn.Release()
	rows, _ := conn.Query(ctx, `
		SELECT 'relation ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND n.nspname NOT LIKE 'pg\_%temp%'
		UNION ALL SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
		UNION ALL SELECT 'publication ' || pubname FROM pg_publication
		UNION ALL SELECT 'subscription ' || subname FROM pg_subscription
			WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		UNION ALL SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = current_database()
		ORDER BY 1`)
	snap, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.T.Fatal(err)
	}
	for _, tb := range tables {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tb).Scan(&exists); err != nil {
			e.T.Fatal(err)
		}
		if !exists {
			continue
		}
		var digest string
		if err := conn.QueryRow(ctx, `SELECT count(*) || ' rows, digest ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM `+tb+` t`).Scan(&digest); err != nil {
			e.T.Fatal(err)
		}
		snap = append(snap, "rows of "+tb+": "+digest)
	}
	return snap
}

// Diff lists what only a holds ("- ") and what only b holds ("+ "), one per line; "" when
// they hold the same.
func Diff(a, b []string) string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, "- "+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, "+ "+x)
		}
	}
	return strings.Join(out, "\n")
}
