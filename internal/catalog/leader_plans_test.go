package catalog

import (
	"context"
	"testing"
)

// The leader's looks for stranded tasks run every round on the plans its session made at the
// first round, generic ones, which may have been made while the task table was empty (a
// catalog just created). Such a plan must not read the tasks the catalog keeps once it has
// many, nor the running tasks of live workers: with nothing stranded and no worker dead, a
// round reads next to nothing, whatever the plan.
func TestLeaderRoundsPlannedOnAnEmptyCatalogReadFewTasks(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
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
	execAll(t, tx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	for name, sql := range statements {
		// The first execution makes the generic plan, on the empty tables.
		execAll(t, tx, sql, runs[name])
	}
	execAll(t, tx,
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		 SELECT 'n' || g, 'host=/nonexistent', 'g' || g, 'primary', 4 FROM generate_series(1, 20) g`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('old', 'sql', 300000, 'finished') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'done' FROM j, generate_series(1, 300000) g`,
		// A live worker running 20,000 of them: the rescue looks at its row, not at its tasks.
		`INSERT INTO deckhand.worker (id, name, concurrency, lease_expires_at) VALUES (7, 'w', 20000, 'infinity')`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, state) VALUES ('now', 'sql', 20000, 'running') RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, worker_id)
		 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % 20), 'app', 'SELECT 1', 3, '1 hour', 'running', 7 FROM j, generate_series(1, 20000) g`)
	for name, run := range runs {
		if blocks, plan := blocksRead(t, tx, run); blocks > 100 {
			t.Errorf("%s, on a plan made while the catalog was empty, read %d blocks with nothing stranded and no worker dead; want few:\n%s", name, blocks, plan)
		}
	}
}
