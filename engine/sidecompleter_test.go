package engine_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A worker whose results come faster than one batch at a time can record them also records
// some beside its own batches, and every task's result is recorded once: the job ends with all
// its tasks done, each with one attempt, and the job's count of done tasks right. A worker of
// a few slots (whose results never pile up) records none that way.
func TestResultsRecordedBesideTheBatchAreRecordedOnce(t *testing.T) {
	e := testenv.New(t)
	busy, few := engine.NewMetrics(nil), engine.NewMetrics(nil)
	_, stopBusy := e.Worker(engine.Config{Concurrency: 1000, Metrics: busy})
	const n = 30000
	tasks := make([]spec.Task, n)
	for i := range tasks {
		tasks[i] = spec.Task{Name: "t" + strconv.Itoa(i), Kind: "noop"}
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	if job := e.Wait(id, 3*time.Minute); job.State != deckhandtype.JobFinished || job.TasksDone != n {
		t.Fatalf("job = %+v; want finished with %d tasks done", job, n)
	}
	var done, attempts, twice int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT
		(SELECT count(*) FROM deckhand.task WHERE job_id = $1 AND state = 'done' AND attempts = 1 AND NOT queued AND worker_id IS NULL),
		(SELECT count(*) FROM deckhand.task_attempt a JOIN deckhand.task t ON t.id = a.task_id WHERE t.job_id = $1),
		(SELECT count(*) FROM (SELECT task_id FROM deckhand.task_attempt GROUP BY task_id HAVING count(*) > 1) x)`, id).Scan(&done, &attempts, &twice); err != nil {
		t.Fatal(err)
	}
	if done != n || attempts != n || twice != 0 {
		t.Errorf("%d tasks done in one attempt, %d attempts recorded, %d tasks with more than one; want %d, %d, 0", done, attempts, twice, n, n)
	}
	if side := counted(t, busy.SideBatches); side == 0 {
		t.Errorf("a worker of 1,000 slots running %d noop tasks recorded no batch beside its own", n)
	}

	// Few slots: every batch is the completer's, with its claim.
	stopBusy()
	e.Worker(engine.Config{Concurrency: 8, Metrics: few})
	id = submit(t, e, &spec.Job{Tasks: tasks[:2000]})
	if job := e.Wait(id, 3*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("second job = %+v; want finished", job)
	}
	if side := counted(t, few.SideBatches); side != 0 {
		t.Errorf("a worker of 8 slots recorded %v batches beside its own; want none", side)
	}
}
