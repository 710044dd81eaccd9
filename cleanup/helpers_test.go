package cleanup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The cleaner is a leader service.
var _ engine.Service = (*cleanup.Cleaner)(nil)

var ctx = context.Background()

// quiet is a logger for in-process workers and cleaners: their chatter would drown test output.
func quiet() *slog.Logger {
	if os.Getenv("DECKHAND_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// logical is a cluster with wal_level=logical for the tests that replicate; one per test
// binary, started on first use and stopped by pgtest.Main.
var logical struct {
	once sync.Once
	c    *pgcluster.Cluster
	err  error
}

func logicalCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	logical.once.Do(func() {
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		logical.c, logical.err = pgcluster.Start(c, pgcluster.Options{Settings: map[string]string{
			"wal_level":                         "logical",
			"max_replication_slots":             "64",
			"max_wal_senders":                   "64",
			"max_logical_replication_workers":   "24",
			"max_worker_processes":              "40",
			"max_sync_workers_per_subscription": "2",
			// Keepalives let the switch see the subscriber caught up without waiting for traffic.
			"wal_sender_timeout":           "10s",
			"wal_receiver_status_interval": "1s",
		}})
	})
	if logical.err != nil {
		t.Fatalf("starting the logical cluster: %v", logical.err)
	}
	return logical.c
}

var dbSeq atomic.Int64

// database creates a database on cluster c, dropped when the test ends.
func database(t testing.TB, c *pgcluster.Cluster, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), dbSeq.Add(1))
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Whatever a failed test left (a subscription, a slot) would block DROP DATABASE.
		_ = c.Exec(cctx, name, `DO $$ DECLARE s record; BEGIN
			FOR s IN SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) LOOP
				EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', s.subname);
				EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', s.subname);
				EXECUTE format('DROP SUBSCRIPTION %I', s.subname);
			END LOOP; END $$`)
		_ = c.Exec(cctx, "postgres", `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
		if err := c.DropDatabase(cctx, name); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	return name
}

// env is a catalog with nodes on some cluster, reached through a fault proxy.
type env struct {
	*testenv.Env
	t       *testing.T
	cluster *pgcluster.Cluster // where the nodes live
	proxy   *pgtest.Proxy      // in front of cluster; nodes are registered through it
	nodes   map[string]string
}

func newEnv(t *testing.T, cluster *pgcluster.Cluster) *env {
	t.Helper()
	e := &env{Env: testenv.New(t, drop.Feature(), move.Feature(), opFeature(nil)), t: t, cluster: cluster, nodes: map[string]string{}}
	e.proxy = pgtest.ProxyTo(t, cluster)
	return e
}

// node creates a database on the env's cluster and registers it as a node through the proxy.
func (e *env) node(name string) string {
	e.t.Helper()
	db := database(e.t, e.cluster, name)
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: name, DSN: e.proxy.DSN(db, pgcluster.Superuser), MaxTasks: 8}); err != nil {
		e.t.Fatal(err)
	}
	e.nodes[name] = db
	return db
}

// exec runs SQL directly (not through the proxy) as the superuser.
func (e *env) exec(db, sql string, args ...any) {
	e.t.Helper()
	if err := e.cluster.Exec(ctx, db, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) conn(db, user string) *pgx.Conn {
	e.t.Helper()
	return pgtest.Connect(e.t, e.cluster.DSN(db, user))
}

// pools are executor pools closed when the test ends. They close in the background: after
// the proxy dropped a connection, pgx sends a cancel request through the proxy, which keeps the
// client side of that request open until pgx gives up (15 s), and Close would wait for it.
func pools(t testing.TB) *nodeconn.Pools {
	p := nodeconn.NewPools(8)
	t.Cleanup(func() { go p.Close() })
	return p
}

// cleaner is a cleaner on the env's catalog with test-friendly intervals.
func (e *env) cleaner() *cleanup.Cleaner {
	c := cleanup.New(e.Client.Catalog(), pools(e.t))
	c.Logger = quiet()
	c.Interval = 200 * time.Millisecond
	c.ProbeInterval = 20 * time.Millisecond
	return c
}

// worker runs an in-process worker with the given executors and no cleaner on its leader, so
// that tests decide when cleanup happens.
func (e *env) worker(features []engine.Feature, services ...engine.Service) *engine.Worker {
	e.t.Helper()
	w, _ := e.Worker(engine.Config{
		Concurrency:    8,
		ShutdownGrace:  time.Second,
		Features:       features,
		NoCleaner:      true,
		LeaderServices: services,
		Logger:         quiet(),
		Backoff:        engine.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	})
	return w
}

func (e *env) submit(job *spec.Job) int64 {
	e.t.Helper()
	id, err := e.Client.Submit(ctx, job)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func payload(t testing.TB, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// records lists the cleanup records of a job.
func (e *env) records(jobID int64) []deckhandtype.CleanupRecord {
	e.t.Helper()
	recs, err := e.Client.CleanupRecords(ctx, deckhandtype.CleanupFilter{JobID: jobID})
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// deckhand runs the command line in-process against the env's catalog.
func (e *env) deckhand(args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	code = cli.Main(c, append([]string{"--catalog", e.DSN}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// snapshot is what a node holds that an operation could leave behind: relations, schemas,
// publications, subscriptions and replication slots of its database, and the rows of the
// tables given.
func (e *env) snapshot(db string, tables ...string) []string {
	e.t.Helper()
	conn, err := e.cluster.Connect(ctx, db)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(ctx)
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
		e.t.Fatal(err)
	}
	for _, tb := range tables {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tb).Scan(&exists); err != nil {
			e.t.Fatal(err)
		}
		if !exists {
			continue
		}
		var digest string
		if err := conn.QueryRow(ctx, `SELECT count(*) || ' rows, digest ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM `+tb+` t`).Scan(&digest); err != nil {
			e.t.Fatal(err)
		}
		snap = append(snap, "rows of "+tb+": "+digest)
	}
	return snap
}

func diff(a, b []string) string {
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

func cliMain(c context.Context, args []string, out, errOut *testenv.Buffer) int {
	return cli.Main(c, args, strings.NewReader(""), out, errOut)
}

// kind is a feature of one task kind run by ex, for workers whose executor a test configures.
func kind(name string, needsNode bool, ex engine.Executor) engine.Feature {
	return engine.Feature{Name: name, Kinds: []engine.Kind{{Name: name, NeedsNode: needsNode,
		Validate: func(json.RawMessage) error { return nil }, New: func(engine.Deps) engine.Executor { return ex }}}}
}

// moveKind runs move_table tasks with the cleaner's test settings.
func (e *env) moveKind(leaveToCleaner bool) engine.Feature {
	return kind(move.KindMoveTable, true, move.MoveTable{Cleaner: e.cleaner(), LeaveToCleaner: leaveToCleaner})
}
