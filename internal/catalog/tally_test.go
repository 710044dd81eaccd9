package catalog_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// Two workers record the last two tasks of a job at the same time, neither seeing the other's
// tally: the one that commits first finds a task of the job still running and leaves the job
// alone; the one that commits last ends it, with every task counted; readers count the
// tallies not folded yet.
func TestConcurrentLastCompletionsEndTheJob(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	w1, w2 := ct.Worker(ctx, t, cat.Pool, nil), ct.Worker(ctx, t, cat.Pool, nil)
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: []ct.TaskOpts{
		{State: TaskDone}, {State: TaskRunning, WorkerID: w1}, {State: TaskRunning, WorkerID: w2}}})

	// Each completion in a transaction of its own, left open until both have run.
	begin := func(task ct.TaskRow) pgx.Tx {
		t.Helper()
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck
		completeIn(t, tx, []catalog.Result{{TaskID: task.ID, Token: task.Token, WorkerID: task.WorkerID, Outcome: OutcomeDone}})
		return tx
	}
	// What a completion runs right after its commit.
	settleEnded := func(task ct.TaskRow) {
		t.Helper()
		if _, err := cat.Pool.Exec(ctx, `SELECT deckhand.settle_ended($1::bigint[])`, []int64{task.ID}); err != nil {
			t.Fatal(err)
		}
	}
	tx1 := begin(job.Tasks[1])
	tx2 := begin(job.Tasks[2])

	jobState := func() (state string, doneInRow, doneSeen, tallies int) {
		t.Helper()
		err := cat.Pool.QueryRow(ctx, `SELECT j.state, j.tasks_done, v.tasks_done, (SELECT count(*) FROM deckhand.job_tally y WHERE y.job_id = j.id)
			FROM deckhand.job j JOIN deckhand.jobs v ON v.id = j.id WHERE j.id = $1`, job.ID).Scan(&state, &doneInRow, &doneSeen, &tallies)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if state, row, seen, tallies := jobState(); state != "running" || row != 1 || seen != 2 || tallies != 1 {
		t.Fatalf("after the first commit: job %s, %d done in its row, %d seen, %d tallies; want running, 1, 2, 1", state, row, seen, tallies)
	}
	// The first worker's settling, while the second has not committed: the job goes on, untouched.
	settleEnded(job.Tasks[1])
	if state, row, seen, tallies := jobState(); state != "running" || row != 1 || seen != 2 || tallies != 1 {
		t.Fatalf("after the first settling: job %s, %d done in its row, %d seen, %d tallies; want running, 1, 2, 1", state, row, seen, tallies)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	settleEnded(job.Tasks[2])
	if state, row, seen, tallies := jobState(); state != "finished" || row != 3 || seen != 3 || tallies != 0 {
		t.Fatalf("after both settled: job %s, %d done in its row, %d seen, %d tallies; want finished, 3, 3, 0", state, row, seen, tallies)
	}
}

// A tally that no completion settled (its settling failed) is folded by the leader's sweep.
func TestLeaderSweepFoldsLeftoverTallies(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskDone}, {State: TaskRunning}}})
	// As a completion whose settling was lost: the task done and tallied, the job's row untouched.
	if _, err := cat.Pool.Exec(ctx, `
		WITH t AS (UPDATE deckhand.task SET state = 'done', worker_id = NULL, finished_at = now() WHERE id = $1)
		INSERT INTO deckhand.job_tally (job_id, completer, done) VALUES ($2, 7, 1)`, job.Tasks[1].ID, job.ID); err != nil {
		t.Fatal(err)
	}
	if err := cat.SettleJobs(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var state string
	var done int
	if err := cat.Pool.QueryRow(ctx, `SELECT state, tasks_done FROM deckhand.job WHERE id = $1`, job.ID).Scan(&state, &done); err != nil {
		t.Fatal(err)
	}
	if state != "finished" || done != 2 {
		t.Fatalf("after the sweep: job %s with %d done, want finished with 2", state, done)
	}
}

// A settling passes a tally that a completion in flight is writing rather than waiting for
// it: that completion settles the job itself once it commits.
func TestSettlingDoesNotWaitForCompletionsInFlight(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	w := ct.Worker(ctx, t, cat.Pool, nil)
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: []ct.TaskOpts{
		{State: TaskRunning, WorkerID: w}, {State: TaskRunning, WorkerID: w}, {State: TaskRunning, WorkerID: w}}})
	// A completion recorded on the fast path, not settled yet.
	if _, err := cat.Pool.Exec(ctx, `
		WITH t AS (UPDATE deckhand.task SET state = 'done', worker_id = NULL, finished_at = now() WHERE id = $1)
		INSERT INTO deckhand.job_tally (job_id, completer, done) VALUES ($2, $3, 1)`, job.Tasks[0].ID, job.ID, w); err != nil {
		t.Fatal(err)
	}
	// The worker's next completion, not committed: it holds the worker's tally row.
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO deckhand.job_tally AS y (job_id, completer, done) VALUES ($1, $2, 1)
		ON CONFLICT (job_id, completer) DO UPDATE SET done = y.done + 1`, job.ID, w); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cat.SettleJobs(quick, []int64{job.ID}); err != nil {
		t.Fatalf("settling beside a completion in flight: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var done int
	if err := cat.Pool.QueryRow(ctx, `SELECT tasks_done FROM deckhand.jobs WHERE id = $1`, job.ID).Scan(&done); err != nil || done != 2 {
		t.Fatalf("jobs.tasks_done = %d (%v), want 2: the tally in flight counted once it committed", done, err)
	}
}

// completeIn runs the completion statement for results in tx, as CompleteAndClaim does, the
// first result's worker recording them, and fails the test unless every result applies.
func completeIn(t *testing.T, tx pgx.Tx, results []catalog.Result) {
	t.Helper()
	args, err := catalog.CompleteArgs(results)
	if err != nil {
		t.Fatal(err)
	}
	args["completer"] = results[0].WorkerID
	var applied, runnable int
	if err := tx.QueryRow(context.Background(), catalog.CompleteSQL, pgx.StrictNamedArgs(args)).Scan(&applied, &runnable, new(int), new(bool)); err != nil || applied != len(results) {
		t.Fatalf("complete %d tasks: applied %d (%v)", len(results), applied, err)
	}
}
