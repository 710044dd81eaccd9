package catalog

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The leader's looks for stranded tasks run every round on the plans its session made at the
// first round, generic ones, which may have been made while the task table was empty (a
// catalog just created). Such a plan must not read the tasks the catalog keeps once it has
// many, nor the running tasks of live workers: with nothing stranded and no worker dead, a
// round reads next to nothing, whatever the plan.
func TestLeaderRoundsPlannedOnAnEmptyCatalogReadFewTasks(t *testing.T) {
	ctx := context.Background()
	cl := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	cat, err := Open(ctx, cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	statements := map[string]string{
		"rebind":   `PREPARE rebind AS ` + rebindStrandedSQL,
		"stranded": `PREPARE stranded(bigint, timestamptz, text, int) AS ` + claimStrandedSQL,
		"expire":   `PREPARE expire(timestamptz) AS ` + expireWorkersSQL,
	}
	runs := map[string]string{"rebind": `EXECUTE rebind`, "stranded": `EXECUTE stranded(1, NULL, '', 256)`, "expire": `EXECUTE expire(NULL)`}
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for name, sql := range statements {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The first execution makes the generic plan, on the empty tables.
		if _, err := tx.Exec(ctx, runs[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, sql := range []string{
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		 SELECT 'n' || g, 'host=/nonexistent', 'g' || g, 'primary', 4 FROM generate_series(1, 20) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('old', 'sql', 300000, 'finished') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'done' FROM j, generate_series(1, 300000) g`,
		// A live worker running 20,000 of them: the rescue looks at its row, not at its tasks.
		`INSERT INTO deckhand.worker (id, name, concurrency, lease_expires_at) VALUES (7, 'w', 20000, 'infinity')`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('now', 'sql', 20000, 'running') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, worker_id)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'running', 7 FROM j, generate_series(1, 20000) g`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for name, run := range runs {
		var doc []byte
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+run).Scan(&doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []struct {
			Plan struct {
				Hit  int64 `json:"Shared Hit Blocks"`
				Read int64 `json:"Shared Read Blocks"`
			}
		}
		if err := json.Unmarshal(doc, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("%s: plan %s: %v", name, doc, err)
		}
		if blocks := plan[0].Plan.Hit + plan[0].Plan.Read; blocks > 100 {
			t.Errorf("%s, on a plan made while the catalog was empty, read %d blocks with nothing stranded and no worker dead; want few:\n%s", name, blocks, doc)
		}
	}
}
