package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A task's COMMIT answer is lost and its node never answers again (the server was
// decommissioned); the operator removes the node from the catalog. The worker asked the node
// for as long as it took, which is now for ever: it must stop once the node is no longer
// registered with the conninfo the attempt used, and fail the task saying its effect is
// unknown (as the rescue does for a dead worker's attempt on a removed node), rather than
// keep the task running and its job unfinished while the worker lives.
func TestCommitLostOnANodeRemovedMeanwhileFails(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	id := submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	xactStatusUnanswered(e)
	e.Worker(engine.Config{Backoff: quickAsking})
	loseCommitAnswer(t, e, db, letGo)
	waitAsked(t, e, 2)
	if err := e.Client.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	job := e.Wait(id, 30*time.Second)
	d := detail(t, e.Env, id)
	if job.State != deckhandtype.JobFailed || d.Tasks[0].State != deckhandtype.TaskFailed || len(d.Attempts) != 1 ||
		d.Attempts[0].Message == nil || !strings.Contains(*d.Attempts[0].Message, "effect is unknown") {
		t.Fatalf("job %s: %s; want failed, its one attempt saying its effect is unknown", job.State, explain(d))
	}
}
