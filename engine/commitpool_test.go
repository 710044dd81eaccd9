package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A worker's sessions on a node, as one owner, are as many as its concurrency, and the task
// whose COMMIT answer was lost asks the node through them what became of it. With
// `serve --concurrency 1` (or as many lost answers at once as the worker runs tasks there:
// the node restarted under them) every session is held by a task that waits for one to ask:
// the asking never got a session, and went on for ever. The task must be settled, once.
func TestLostCommitIsAskedAboutWithConcurrencyOne(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	id := submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	e.Worker(engine.Config{Concurrency: 1})
	loseCommitAnswer(t, e, db, letGo)
	wantFinishedOnce(t, e, db, id, e.Wait(id, 30*time.Second))
}
