package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/spec"
)

// A transactional task that wrote records its node transaction id in the catalog before its
// COMMIT. A submitter holding her job's rows locked while her writing tasks end one after the
// other (each ending a little after the last) makes each of their ids meet the lock: every
// batch of ids that one of hers is in waited 2 s for it, every other user's commits on that
// worker with it, and at each of hers again. Once one of a job's ids met the lock, the job's
// later ones wait beside it, not in front of everyone else's.
func TestAttackHeldRowsHoldBackNoOtherCommit(t *testing.T) {
	e, mallory, asMallory := busyNodeWithMallory(t)
	tasks := make([]spec.Task, 10)
	for i := range tasks {
		tasks[i] = spec.Task{Name: fmt.Sprintf("t%d", i), Node: "n1",
			SQL: fmt.Sprintf("SELECT pg_catalog.pg_current_xact_id(), pg_catalog.pg_sleep(%.1f)", 1.5+0.4*float64(i))}
	}
	own, err := asMallory.Submit(ctx, &spec.Job{Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	waitAllTasks(t, e, own, deckhandtype.TaskRunning, "her tasks all run")
	letGo := holdJobLocks(t, pgtest.Connect(t, e.RoleDSN(mallory)), own)
	time.Sleep(time.Second) // her tasks end one after the other from now on, for 4 s
	// Meanwhile an admin's writing tasks commit one after the other.
	var slowest time.Duration
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		other := submit(t, e, &spec.Job{Description: "admin's", Tasks: []spec.Task{
			{Name: "one", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT pg_catalog.pg_current_xact_id()"}}})
		start := time.Now()
		if job := e.Wait(other, 30*time.Second); job.State != deckhandtype.JobFinished {
			t.Errorf("the admin's job: %s", job.State)
		}
		slowest = max(slowest, time.Since(start))
	}
	// The first of her ids to meet the lock costs the batch it is in 2 s (lock_timeout); no
	// later one costs anyone anything.
	if slowest > 3*time.Second {
		t.Errorf("an admin's job took %s while her job's rows were held", slowest.Round(100*time.Millisecond))
	}
	letGo()
	waitAllTasks(t, e, own, deckhandtype.TaskDone, "her tasks are recorded done once her locks are released")
}
