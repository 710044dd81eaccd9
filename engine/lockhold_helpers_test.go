package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// The held-lock tests share one setup: a submitter who locks her own job's rows, as
// deckhand.pause does, in a statement that goes on for a minute, while a worker records her
// results and everyone else's.

// busyNodeWithMallory is a catalog with node n1 (32 tasks at once), a worker that runs 16
// tasks at once, and a submitter, mallory, with her client.
func busyNodeWithMallory(t *testing.T) (e *testenv.Env, mallory string, asMallory *engine.Client) {
	t.Helper()
	e = testenv.New(t)
	e.AddNode("n1", 32)
	mallory, asMallory = e.Submitter("mallory")
	e.Worker(engine.Config{Concurrency: 16})
	return e, mallory, asMallory
}

// holdJobLocks has conn lock job's rows with deckhand.pause in a statement that sleeps for a
// minute, so that the locks stay held. The returned func ends the statement, and with it the
// locks, and waits until it has ended.
func holdJobLocks(t *testing.T, conn *pgx.Conn, job int64) (letGo func()) {
	t.Helper()
	held := make(chan error, 1)
	hold, cancelHold := context.WithCancel(ctx)
	t.Cleanup(cancelHold)
	go func() {
		_, err := conn.Exec(hold, `SELECT deckhand.pause($1, false), pg_catalog.pg_sleep(60)`, job)
		held <- err
	}()
	return func() {
		cancelHold()
		<-held
	}
}

// waitAllTasks waits until every task of job is in state.
func waitAllTasks(t *testing.T, e *testenv.Env, job int64, state deckhandtype.TaskState, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, tk := range detail(t, e, job).Tasks {
			if tk.State != state {
				return false
			}
		}
		return true
	}, what)
}
