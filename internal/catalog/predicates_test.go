package catalog_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The predicates of migration 0006 are planned inside the statements that call them, as a
// worker plans them: a function that stopped being inlined (declared VOLATILE, STRICT or
// SECURITY DEFINER, given a SET clause, or a scalar with a subquery) would show up by name.
func TestSharedPredicatesAreInlined(t *testing.T) {
	ctx := context.Background()
	cat, cl, db := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	role := "inline_worker_" + db
	if err := pgtest.CreateLoginRole(ctx, cl, role, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) //nolint:errcheck
	})
	if err := cl.Exec(ctx, "postgres", "GRANT deckhand_worker TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	worker, err := catalog.Open(ctx, cl.DSN(db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	for name, query := range map[string]string{
		"operation_alive": `SELECT o.id FROM deckhand.operation o
			CROSS JOIN LATERAL deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, $1) a
			WHERE o.id = $2 AND a.alive`,
		"cleanup_state_after": `SELECT deckhand.cleanup_state_after(o.state, r.policy)
			FROM deckhand.cleanup_record r JOIN deckhand.operation o ON o.id = r.operation_id WHERE r.id = $2 AND $1::timestamptz IS NULL`,
	} {
		rows, _ := worker.Pool.Query(ctx, `EXPLAIN (VERBOSE, COSTS OFF) `+query, nil, 1)
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, name) {
			t.Errorf("deckhand.%s is not inlined:\n%s", name, text)
		}
	}
}
