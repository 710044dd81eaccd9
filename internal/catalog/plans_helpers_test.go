package catalog

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// freshCatalog is a catalog of its own, migrated, on the shared test cluster.
func freshCatalog(t *testing.T) *Catalog {
	t.Helper()
	ctx := context.Background()
	cat, err := Open(ctx, pgtest.Shared(t).DSN(pgtest.NewDatabase(t), pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return cat
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// execAll runs each statement, failing the test at the first error.
func execAll(t *testing.T, db execer, statements ...string) {
	t.Helper()
	for _, sql := range statements {
		if _, err := db.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// blocksRead runs EXPLAIN (ANALYZE, BUFFERS) of statement and returns the shared blocks the
// statement read (from the buffers or not), and the plan to show when that is too many.
func blocksRead(t *testing.T, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, statement string) (int64, string) {
	t.Helper()
	var doc []byte
	if err := db.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+statement).Scan(&doc); err != nil {
		t.Fatalf("%s: %v", statement, err)
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(doc, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("%s: plan %s: %v", statement, doc, err)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read, string(doc)
}
