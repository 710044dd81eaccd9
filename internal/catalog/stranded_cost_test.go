package catalog

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The leader runs ClaimStranded every round, and almost always no node is gone. What it reads
// then must not grow with the tasks the catalog keeps (finished ones stay for the retention
// period, a million is ordinary): a plan that walks the task table in id order looking for
// runnable tasks of gone nodes reads all of them, every second.
func TestClaimStrandedReadsNoFinishedTasks(t *testing.T) {
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
	for _, sql := range []string{
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		 SELECT 'n' || g, 'host=/nonexistent', 'g' || g, 'primary', 4 FROM generate_series(1, 20) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('old', 'sql', 300000, 'finished') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'done' FROM j, generate_series(1, 300000) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('queued', 'sql', 2000) RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j, generate_series(1, 2000) g`,
		`VACUUM ANALYZE`,
	} {
		if _, err := cat.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The statement as the leader runs it: catalog sessions plan generically.
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `PREPARE stranded(bigint, timestamptz, text, int) AS `+claimStrandedSQL); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	var doc []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE stranded(1, NULL, '', 256)`).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", doc, err)
	}
	// 20 nodes: one index probe each, and a look at the node table.
	if blocks := plan[0].Plan.Hit + plan[0].Plan.Read; blocks > 500 {
		t.Errorf("with no node gone, ClaimStranded read %d blocks; want few, whatever the finished tasks:\n%s", blocks, doc)
	}
}
