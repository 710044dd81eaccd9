package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/spec"
)

const (
	catalogDB    = "deckhand" // the catalog's database on the throwaway cluster
	nodeMaxTasks = 4          // per node, as registered on the throwaway cluster
)

// nodeDB is the database a node of the throwaway cluster lives in.
func nodeDB(node string) string { return "shop_" + node }

// startCluster starts the throwaway cluster and prepares the catalog, the node databases and
// the owner role on it. It returns the cluster, if it started, even on error, so that the
// caller stops it.
func (r *runner) startCluster(ctx context.Context) (*pgcluster.Cluster, error) {
	r.status.Update("starting a throwaway PostgreSQL cluster…")
	t0 := time.Now()
	cl, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		r.status.Done("could not start PostgreSQL")
		return nil, err
	}
	conn, err := cl.Connect(ctx, "postgres")
	if err != nil {
		return cl, err
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	var version string
	if err := conn.QueryRow(ctx, "SELECT split_part(current_setting('server_version'), ' ', 1)").Scan(&version); err != nil {
		return cl, err
	}
	r.status.Done(fmt.Sprintf("  postgres  PostgreSQL %s on %s, started in %s\n            a throwaway cluster in %s, removed on exit",
		version, cl.Addr(), since(t0), cl.Dir))

	owner := pgx.Identifier{r.opts.Owner}.Sanitize()
	stmts := []string{
		"CREATE ROLE " + owner + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
		"CREATE DATABASE " + catalogDB,
	}
	for _, n := range r.opts.Nodes {
		stmts = append(stmts, "CREATE DATABASE "+pgx.Identifier{nodeDB(n)}.Sanitize()+" OWNER "+owner)
	}
	for _, s := range stmts {
		// CREATE DATABASE refuses a transaction block, so one statement at a time.
		if _, err := conn.Exec(ctx, s); err != nil {
			return cl, fmt.Errorf("prepare the cluster: %s: %w", s, err)
		}
	}
	r.catalogDSN = cl.DSN(catalogDB, pgcluster.Superuser)
	cat, err := catalog.Open(ctx, r.catalogDSN)
	if err != nil {
		return cl, err
	}
	defer cat.Close()
	if _, err := cat.Migrate(ctx); err != nil {
		return cl, err
	}
	var dbs []string
	for _, n := range r.opts.Nodes {
		_, err := cat.AddNode(ctx, deckhandtype.Node{Name: n, DSN: cl.DSN(nodeDB(n), pgcluster.Superuser), Group: n, MaxTasks: nodeMaxTasks})
		if err != nil {
			return cl, err
		}
		dbs = append(dbs, nodeDB(n))
	}
	r.printf("  catalog   database %s, schema version %d (deckhand init)\n", catalogDB, catalog.SchemaVersion())
	r.printf("  owner     role %s: LOGIN, not a superuser, owns %s\n", r.opts.Owner, strings.Join(dbs, ", "))
	return cl, nil
}

func (r *runner) stopCluster(cl *pgcluster.Cluster) {
	r.status.Update("stopping PostgreSQL…")
	t0 := time.Now()
	if err := cl.Stop(); err != nil {
		r.status.Done("  could not stop PostgreSQL cleanly: " + spec.OneLine(err.Error()))
		return
	}
	r.status.Done(fmt.Sprintf("stopped PostgreSQL on %s and removed %s (%s)", cl.Addr(), cl.Dir, since(t0)))
}

// loadNodes reads the demo's nodes from the catalog; each must be registered.
func (r *runner) loadNodes(ctx context.Context, client *engine.Client) error {
	nodes, err := client.Nodes(ctx)
	if err != nil {
		return err
	}
	byName := map[string]deckhandtype.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var missing, shown []string
	for _, n := range r.opts.Nodes {
		node, ok := byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		r.nodes = append(r.nodes, node)
		where := "database " + dbName(node.DSN)
		shown = append(shown, fmt.Sprintf("%s (%s, at most %d tasks)", n, where, node.MaxTasks))
	}
	if len(missing) > 0 {
		return fmt.Errorf("node %s: %w in the catalog: register with `deckhand node add NAME --dsn CONNINFO` or pass --nodes",
			strings.Join(missing, ", "), catalog.ErrNotFound)
	}
	if r.opts.CatalogDSN != "" {
		r.printf("  catalog   %s (configured; the demo's tables go to schema %s on each node)\n", nodeconn.Redact(r.catalogDSN), Schema)
		r.printf("  owner     role %s\n", r.opts.Owner)
	}
	r.printf("  nodes     %s\n", strings.Join(shown, "; "))
	return nil
}

// dbName is the database a conninfo names, for display.
func dbName(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil && cfg.Database != "" {
		return cfg.Database
	}
	return "?"
}
