package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task's COMMIT answer is lost and its node does not answer; meanwhile the worker loses its
// lease (a long pause) and starts over as a new worker. The attempt is the leader's rescue's
// now, which asks the node itself, and whatever the worker learns would be fenced off: the
// worker must stop asking and give the task's slot back, rather than hold it for as long as
// the node does not answer while the tasks of other nodes wait for it.
func TestLeaseLostEndsTheAskingAboutALostCommit(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	e.Node("n2")
	submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	xactStatusUnanswered(e)
	w, _ := e.Worker(engine.Config{Concurrency: 1, LeaseTTL: 2 * time.Second})
	loseCommitAnswer(t, e, db, letGo)
	waitAsked(t, e, 2)
	// The catalog takes the worker for dead: its next heartbeat finds its lease lost.
	e.Exec(e.DB, `UPDATE deckhand.worker SET stopped_at = now() WHERE id = $1`, w.ID())
	second := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{{Name: "b", Node: "n2", SQL: "SELECT 1"}}})
	if job := e.Wait(second, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("the task of another node: job %s, want finished", job.State)
	}
}
