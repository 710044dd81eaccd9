package move_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A job spec may move an object and then move it on (or back) in a task that depends on the
// first: a round trip that takes a schema off its group while that group's server is
// upgraded. The second move's from is where the first puts the object, not where the catalog
// places it at submission; refusing it there refuses a job that runs to the end.
func TestJobSpecMayMoveWhatItsOwnMoveMoved(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	e.worker(move.Mover{})
	// The catalog places app on g2 once it moved there.
	if job := e.Wait(e.submit(move.Request{Schema: "app", From: "g1", To: "g2"}), 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("the first move = %s: %s", job.State, e.lastError(job.ID))
	}
	task := func(name, from, to string, deps ...string) spec.Task {
		tk, err := move.Request{Schema: "app", From: from, To: to, Owner: e.owner}.Task(name)
		if err != nil {
			t.Fatal(err)
		}
		tk.DependsOn = deps
		tk.MaxAttempts = 1
		tk.Timeout = spec.Duration(2 * time.Minute)
		return tk
	}
	id, err := e.Client.Submit(ctx, &spec.Job{Description: "round trip", Tasks: []spec.Task{
		task("back", "g2", "g1"), task("again", "g1", "g2", "back")}})
	if err != nil {
		t.Fatalf("Submit of a move back and a move again after it = %v; want accepted", err)
	}
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		d, err := e.Client.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range d.Attempts {
			if a.Message != nil {
				t.Logf("task %s attempt %d %s: %s", a.TaskName, a.Attempt, a.Outcome, *a.Message)
			}
		}
		t.Fatalf("the round trip = %s", job.State)
	}
}

// A move whose target still has the old copy that an earlier move left there for the cleaner
// (a reader kept it in use) waits for the cleaner to drop it, rather than fail because the
// target already has the schema.
func TestMoveBackWaitsForTheCleanerToDropTheOldCopy(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	// A reader on the source keeps its tables in use past the move: the old copy outlives it.
	reader := pgtest.Connect(t, e.NodeCluster.DSN(e.src, pgcluster.Superuser))
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM app.customers`); err != nil {
		t.Fatal(err)
	}
	e.worker(move.Mover{})
	if job := e.Wait(e.submit(move.Request{Schema: "app", From: "g1", To: "g2"}), 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("the first move = %s: %s", job.State, e.lastError(job.ID))
	}
	back := e.submit(move.Request{Schema: "app", From: "g2", To: "g1"})
	time.Sleep(2 * time.Second) // the move back starts and finds the old copy on g1
	if job, err := e.Client.JobRow(ctx, back); err != nil || job.State != deckhandtype.JobRunning {
		t.Fatalf("the move back while the old copy is in use: %v %v: %s", job.State, err, e.lastError(back))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(back, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("the move back = %s: %s", job.State, e.lastError(back))
	}
}
