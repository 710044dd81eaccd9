package catalog

import (
	"context"
	"testing"
)

// The leader runs ClaimStranded every round, and almost always no node is gone. What it reads
// then must not grow with the tasks the catalog keeps (finished ones stay for the retention
// period, a million is ordinary): a plan that walks the task table in id order looking for
// runnable tasks of gone nodes reads all of them, every second.
func TestClaimStrandedReadsNoFinishedTasks(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
	execAll(t, cat.Pool,
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		 SELECT 'n' || g, 'host=/nonexistent', 'g' || g, 'primary', 4 FROM generate_series(1, 20) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('old', 'sql', 300000, 'finished') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'done' FROM j, generate_series(1, 300000) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('queued', 'sql', 2000) RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j, generate_series(1, 2000) g`,
		`VACUUM ANALYZE`)
	// The statement as the leader runs it: catalog sessions plan generically.
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	execAll(t, tx, `SET LOCAL plan_cache_mode = force_generic_plan`,
		`PREPARE stranded(bigint, timestamptz, text, int) AS `+claimStrandedSQL)
	blocks, plan := blocksRead(t, tx, `EXECUTE stranded(1, NULL, '', 256)`)
	// 20 nodes: one index probe each, and a look at the node table.
	if blocks > 500 {
		t.Errorf("with no node gone, ClaimStranded read %d blocks; want few, whatever the finished tasks:\n%s", blocks, plan)
	}
}
