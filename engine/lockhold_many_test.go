package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/spec"
)

// A submitter whose job runs many tasks on a worker holds the job's rows locked (a
// deckhand.pause whose statement goes on) while they end. Each of her results then waits for
// her lock: one after the other, 2 s each, they held back every other result of the worker
// for as long as she had tasks, and again at each later batch one of hers was in. Once one of
// a job's results met the lock, the others of that job wait beside it, not in front of
// everyone else's.
func TestAttackManyHeldResultsHoldBackNoOtherJob(t *testing.T) {
	e, mallory, asMallory := busyNodeWithMallory(t)
	tasks := make([]spec.Task, 12)
	for i := range tasks {
		tasks[i] = spec.Task{Name: "t" + string(rune('a'+i)), Node: "n1", SQL: "SELECT pg_sleep(1)"}
	}
	own, err := asMallory.Submit(ctx, &spec.Job{Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	waitAllTasks(t, e, own, deckhandtype.TaskRunning, "her tasks all run")
	letGo := holdJobLocks(t, pgtest.Connect(t, e.RoleDSN(mallory)), own)
	time.Sleep(1500 * time.Millisecond) // her tasks have ended; their results meet her locks
	other := submit(t, e, &spec.Job{Description: "admin's", Tasks: []spec.Task{
		{Name: "one", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1"}}})
	start := time.Now()
	if job := e.Wait(other, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("the admin's job: %s", job.State)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the admin's job took %s while her job's rows were held: her results were recorded in front of it", took.Round(time.Second))
	}
	letGo()
	waitAllTasks(t, e, own, deckhandtype.TaskDone, "her tasks are recorded done once her locks are released")
}
