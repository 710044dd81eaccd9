package catalog_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// The catalog's sessions never compile with JIT, whatever a plan's estimated cost: the
// leader's walk of the nodes with work, estimated at a million once tens of thousands of
// tasks are runnable, spent 1.4–4.9 s of the server's CPU compiling its expressions every
// round. Here jit_above_cost 0 makes every plan qualify.
func TestCatalogSessionsCompileNothing(t *testing.T) {
	ctx := context.Background()
	cat, cl, db := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	jitPlanned := func(q interface {
		Begin(context.Context) (pgx.Tx, error)
	}) bool {
		t.Helper()
		tx, err := q.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `SET LOCAL jit_above_cost = 0`); err != nil {
			t.Fatal(err)
		}
		var plan []map[string]any
		if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT count(*) FROM deckhand.task WHERE attempts + 1 > 0`).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		_, jit := plan[0]["JIT"]
		return jit
	}
	if jitPlanned(cat.Pool) {
		t.Error("a catalog session plans JIT compilation")
	}
	var setting string
	if err := cat.Pool.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&setting); err != nil || setting != "off" {
		t.Errorf("catalog session: jit = %q (%v), want off", setting, err)
	}
	// The same statement in a plain session of the same server is compiled where the server
	// can: the setting is what keeps the catalog's sessions out of it.
	conn, err := pgx.Connect(ctx, cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx) //nolint:errcheck
	var available bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if got := jitPlanned(conn); got != available {
		t.Errorf("plain session: JIT planned %v, want %v (pg_jit_available)", got, available)
	}
}

// A conninfo that names jit keeps its value: the setting is deckhand's default, not a rule.
func TestCatalogConninfoMaySetJIT(t *testing.T) {
	ctx := context.Background()
	_, cl, db := emptyCatalog(t)
	cat, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser)+" jit=on")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var setting string
	if err := cat.Pool.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&setting); err != nil || setting != "on" {
		t.Errorf("catalog opened with jit=on in its conninfo: jit = %q (%v)", setting, err)
	}
}
