package catalog_test

import (
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A batch of results of tasks that had no dependents when they were claimed is recorded by the
// statement without the parts that release dependents. A task that gained one since (tasks
// added to its running job) must still release it: that statement records nothing then, and the
// batch is recorded by the one that does.
func TestCompletionReleasesADependentAddedAfterTheClaim(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 10, 'infinity')`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('grows', 'noop', 3) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
		SELECT j.id, 'first-' || g, 'noop', 'app', 3, '1 hour', 'runnable' FROM j, generate_series(1, 2) g`)
	claimed, err := cat.Claim(ctx, 1, 2)
	if err != nil || len(claimed) != 2 || claimed[0].HasDependents || claimed[1].HasDependents {
		t.Fatalf("claimed %v (%v), want both tasks, without dependents", claimed, err)
	}
	// While they run, a task is added that waits on the first.
	exec(`UPDATE deckhand.task SET has_dependents = true WHERE name = 'first-1'`)
	exec(`INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state, pending_deps)
		SELECT job_id, 'then', 'noop', 'app', 3, '1 hour', 'blocked', 1 FROM deckhand.task WHERE name = 'first-1'`)
	exec(`INSERT INTO deckhand.task_dep (task_id, depends_on)
		SELECT (SELECT id FROM deckhand.task WHERE name = 'then'), (SELECT id FROM deckhand.task WHERE name = 'first-1')`)
	results := make([]catalog.Result, len(claimed))
	for i, c := range claimed {
		results[i] = catalog.Result{TaskID: c.ID, Token: c.Token, WorkerID: 1, Outcome: deckhandtype.OutcomeDone, HasDependents: c.HasDependents}
	}
	out, err := cat.Complete(ctx, results)
	if err != nil || out.Applied != 2 || out.Runnable != 1 {
		t.Fatalf("completion applied %d results and made %d tasks runnable (%v), want 2 and 1", out.Applied, out.Runnable, err)
	}
	var state string
	if err := cat.Pool.QueryRow(ctx, `SELECT state FROM deckhand.task WHERE name = 'then'`).Scan(&state); err != nil || state != "runnable" {
		t.Fatalf("the dependent added after the claim is %q (%v), want runnable", state, err)
	}
	var attempts int
	if err := cat.Pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.task_attempt`).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("%d attempts recorded (%v), want 2: each result once", attempts, err)
	}
}
