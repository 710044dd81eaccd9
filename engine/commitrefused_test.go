package engine_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A task's COMMIT reaches the node and its answer is lost; before the worker can ask the node
// what became of it, the submitter's membership in the owner role is revoked there (someone
// leaving the team). Asking as the owner is refused from then on, and would be for ever: the
// worker must still learn that the transaction committed (pg_xact_status needs no privilege)
// and record the task done once, rather than ask in vain while the job never ends.
func TestCommitLostThenOwnerRefusedIsStillSettled(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	owner := e.Role("owner")
	sub, c := e.Submitter("sub", owner)
	e.NodeExec(db, `GRANT INSERT, SELECT ON hits TO `+pgx.Identifier{owner}.Sanitize())
	job := oneHitJob()
	job.Tasks[0].Owner = owner
	id, err := c.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	letGo := holdCommitAnswers(e)
	answer := xactStatusUnanswered(e)
	e.Worker(engine.Config{Backoff: quickAsking})
	loseCommitAnswer(t, e, db, letGo)
	waitAsked(t, e, 1)
	e.NodeExec("postgres", "REVOKE "+pgx.Identifier{owner}.Sanitize()+" FROM "+pgx.Identifier{sub}.Sanitize())
	answer()
	wantFinishedOnce(t, e, db, id, e.Wait(id, 30*time.Second))
}
