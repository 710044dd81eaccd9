package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A submitter may lock the rows of its own job for as long as it likes: deckhand.pause,
// cancel and resume lock them, and the caller's statement (`SELECT deckhand.pause(42),
// pg_sleep(3600)`) or open transaction keeps them locked. The worker recording a result of
// that job must not wait for the lock with everyone else's results and claims behind it: an
// admin's job submitted meanwhile still runs and is recorded at once.
func TestAttackHeldJobLocksHoldBackNoOtherJob(t *testing.T) {
	e := newIntruderEnv(t)
	own, err := e.client.Submit(ctx, &spec.Job{Tasks: []spec.Task{
		{Name: "short", Node: "n1", Owner: e.app, SQL: "SELECT pg_sleep(0.5)"},
		{Name: "after", Node: "n1", Owner: e.app, SQL: "SELECT 1", DependsOn: []string{"short"}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitTaskRunning(t, own, "short")
	// The intruder pauses her own job, and holds the locks it took for a minute.
	letGo := holdJobLocks(t, e.conn, own)
	time.Sleep(time.Second) // her task has ended on the node; its result waits for her locks
	other := submit(t, e.Env, &spec.Job{Description: "admin's", Tasks: []spec.Task{
		{Name: "one", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1"},
		{Name: "two", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 2", DependsOn: []string{"one"}}}})
	if job := e.Wait(other, 15*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("the admin's job, while the intruder holds her job's locks: %s", job.State)
	}
	letGo()
	// Her own result is recorded once her locks are gone: nothing was lost.
	testenv.Eventually(t, 30*time.Second, func() bool {
		d := detail(t, e.Env, own)
		return d.Tasks[0].State == deckhandtype.TaskDone
	}, "the intruder's own task is recorded done once her locks are released")
}

// waitTaskRunning waits until the named task of job runs.
func (e *intruderEnv) waitTaskRunning(t *testing.T, job int64, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, tk := range detail(t, e.Env, job).Tasks {
			if tk.Name == name && tk.State == deckhandtype.TaskRunning {
				return true
			}
		}
		return false
	}, "task "+name+" runs")
}
