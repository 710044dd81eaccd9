package move_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
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
		t.Fatalf("the round trip = %s: %s", job.State, e.lastError(id))
	}
}
