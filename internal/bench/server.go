package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// startServer returns the server to measure on: dsn, or a throwaway cluster with stock
// durability settings and the extra settings given.
func startServer(ctx context.Context, dsn string, out io.Writer, settings ...map[string]string) (string, func(), error) {
	if dsn != "" {
		return dsn, func() {}, nil
	}
	fmt.Fprintln(out, "starting a throwaway PostgreSQL cluster (stock durability settings)...")
	o := pgcluster.Options{Durable: true}
	if len(settings) > 0 {
		o.Settings = settings[0]
	}
	cl, err := pgcluster.Start(ctx, o)
	if err != nil {
		return "", nil, err
	}
	return cl.DSN("postgres", pgcluster.Superuser), func() { cl.Stop() }, nil //nolint:errcheck
}

// withDB is dsn connecting to database db, in either conninfo form.
func withDB(dsn, db string) string { return nodeconn.WithDBName(dsn, db) }

func scratchDB(ctx context.Context, admin *pgx.Conn, prefix string) (string, func(), error) {
	name := fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create scratch database: %w", err)
	}
	return name, func() {
		admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
	}, nil
}

// scratchCatalog creates a scratch database on server holding an initialised catalog, and
// returns its conninfo and a client on it; cleanup closes the client and drops the database.
func scratchCatalog(ctx context.Context, admin *pgx.Conn, server string, features ...engine.Feature) (dsn string, client *engine.Client, cleanup func(), err error) {
	db, dropDB, err := scratchDB(ctx, admin, "deckhand_bench")
	if err != nil {
		return "", nil, nil, err
	}
	dsn = withDB(server, db)
	cat, err := catalog.Open(ctx, dsn)
	if err == nil {
		_, err = cat.Migrate(ctx)
		cat.Close()
	}
	if err == nil {
		client, err = engine.Open(ctx, dsn, append([]engine.Feature{benchFeature(nil), drop.Feature()}, features...)...)
	}
	if err != nil {
		dropDB()
		return "", nil, nil, err
	}
	return dsn, client, func() { client.Close(); dropDB() }, nil
}

func startWorkers(ctx context.Context, dsn string, o Options, rec *recorder) (func(), error) {
	return startWorkersWith(ctx, dsn, o.Workers, o.Concurrency, rec, nil)
}

// startWorkersWith starts workers of the given concurrency, each with a catalog pool of its
// own, sharing metrics m (nil: each its own).
func startWorkersWith(ctx context.Context, dsn string, workers, concurrency int, rec *recorder, m *engine.Metrics) (func(), error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var cats []*catalog.Catalog
	for i := range workers {
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			cancel()
			wg.Wait()
			for _, c := range cats {
				c.Close()
			}
			return nil, err
		}
		cats = append(cats, cat)
		w := engine.NewWorker(cat, engine.Config{Name: "bench-" + strconv.Itoa(i), Concurrency: concurrency,
			Features: []engine.Feature{benchFeature(rec), export.Feature()}, Metrics: m})
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(runCtx) }() //nolint:errcheck
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			for _, c := range cats {
				c.Close()
			}
		})
	}, nil
}
