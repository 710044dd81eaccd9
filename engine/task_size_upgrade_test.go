package engine_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A catalog upgraded to the 16 MiB bound on a task's SQL may hold tasks written before it
// with more: they were taken then, and a job of them may be queued or running during the
// upgrade. Every later write of such a row (its claim, its result) must still go through:
// a check that refused it failed the whole claim it was in, every time, so that nothing more
// was claimed on its node, and the result of one running at the upgrade was retried for
// ever with every other result of its worker held behind it.
func TestTaskWrittenBeforeTheSizeBoundStillRuns(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	db := e.Pool(e.DB)
	// The catalog as it was before the bound (0023 and every later migration undone), a task written
	// then, and the upgrade.
	e.Exec(e.DB, `CREATE OR REPLACE VIEW deckhand.nodes AS
			SELECT name, dsn, node_group, max_tasks, role, replay_lsn, checked_at, last_error, created_at,
				(SELECT count(*) FROM deckhand.task t WHERE t.node = n.name AND t.state IN ('running', 'cancelling')) AS running_tasks
			FROM deckhand.node n;
		DROP TRIGGER IF EXISTS task_size ON deckhand.task;
		DROP FUNCTION IF EXISTS deckhand.refuse_huge_task();
		ALTER TABLE deckhand.task DROP CONSTRAINT IF EXISTS task_sql_at_most_16_mib,
			DROP CONSTRAINT IF EXISTS task_payload_at_most_16_mib,
			DROP COLUMN IF EXISTS xid_timeline, DROP COLUMN IF EXISTS xid_system, DROP COLUMN IF EXISTS queued;
		ALTER TABLE deckhand.export DROP COLUMN IF EXISTS consistency_timeline;
		DROP TABLE IF EXISTS deckhand.export_destination;
		DROP TRIGGER IF EXISTS job_settings_size ON deckhand.job;
		DROP FUNCTION IF EXISTS deckhand.refuse_huge_settings();
		DROP TRIGGER IF EXISTS task_move_admission ON deckhand.task;
		DROP FUNCTION IF EXISTS deckhand.admit_moves();
		DROP TABLE IF EXISTS deckhand.move_admission;
		DROP FUNCTION IF EXISTS deckhand.live_moves();
		DROP FUNCTION IF EXISTS deckhand.live_moves_for(text);
		DROP FUNCTION IF EXISTS deckhand.role_may_act_on(text, text, text[]);
		DROP INDEX IF EXISTS deckhand.task_move_not_ended_idx;
		DROP FUNCTION IF EXISTS deckhand.move_objects(jsonb);
		DELETE FROM deckhand.schema_migration WHERE version >= 23`)
	big := "SELECT 1 -- " + strings.Repeat("x", 17<<20)
	doc, err := json.Marshal(map[string]any{"description": "legacy", "tasks": []any{
		map[string]any{"name": "big", "node": "n1", "owner": pgcluster.Superuser, "sql": big}}})
	if err != nil {
		t.Fatal(err)
	}
	var legacy int64
	if err := db.QueryRow(ctx, `SELECT deckhand.submit($1::jsonb)`, string(doc)).Scan(&legacy); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Catalog().Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	after := e.Submit(&spec.Job{Description: "after", Tasks: []spec.Task{
		{Name: "one", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1"}}})
	e.Worker(engine.Config{Concurrency: 1})
	if job := e.Wait(after, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("a job submitted after the upgrade: %s", job.State)
	}
	if job := e.Wait(legacy, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("the job written before the upgrade: %s", job.State)
	}
}
