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

// A settling of several jobs folds their tallies in the order it updates their rows, which
// need not be their ids' (here the table's order, the second job first); a completion writes
// its tallies in job order. Each can hold a tally the other waits for, and the deadlock
// detector picks the one that waited first, here the settling: it tries again.
func TestSettlingThatMeetsACompletionInADeadlockTriesAgain(t *testing.T) {
	ctx := context.Background()
	cat, _, _ := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := cat.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	w := ct.Worker(ctx, t, cat.Pool, nil)
	running := []ct.TaskOpts{{State: TaskRunning, WorkerID: w}, {State: TaskRunning, WorkerID: w}, {State: TaskRunning, WorkerID: w}}
	j1 := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: running})
	j2 := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: running})
	// The first job's row moves after the second's; each job has a task done and tallied.
	exec(`UPDATE deckhand.job SET description = description || ' ' WHERE id = $1`, j1.ID)
	var order []int64
	if err := cat.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY ctid) FROM deckhand.job`).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != j2.ID {
		t.Fatalf("job rows in the table's order: %v, want %d first", order, j2.ID)
	}
	for _, j := range []ct.JobRow{j1, j2} {
		exec(`WITH t AS (UPDATE deckhand.task SET state = 'done', worker_id = NULL, finished_at = now() WHERE id = $1)
			INSERT INTO deckhand.job_tally (job_id, completer, done) VALUES ($2, $3, 1)`, j.Tasks[0].ID, j.ID, w)
	}

	// A completion of a task of each job, as one statement would write their tallies: the
	// first job's, then the second's.
	complete := func(tx pgx.Tx, task ct.TaskRow) {
		t.Helper()
		args, err := catalog.CompleteArgs([]catalog.Result{{TaskID: task.ID, Token: task.Token, WorkerID: w, Outcome: OutcomeDone}})
		if err != nil {
			t.Fatal(err)
		}
		args["completer"], args["released_by"] = w, "0"
		var applied, runnable int
		var ending []int64
		if err := tx.QueryRow(ctx, catalog.CompleteSQL, pgx.StrictNamedArgs(args)).Scan(&applied, &runnable, &ending); err != nil || applied != 1 {
			t.Fatalf("complete task %d: applied %d (%v)", task.ID, applied, err)
		}
	}
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	complete(tx, j1.Tasks[1])

	settled := make(chan error, 1)
	go func() { settled <- cat.SettleJobs(ctx, []int64{j1.ID, j2.ID}) }()
	// The settling folds the second job's tally, then waits for the completion's of the first.
	for waiting := false; !waiting; {
		if err := cat.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%tasks_done = j.tasks_done WHERE%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-settled:
			t.Fatalf("the settling ended (%v) before the completion committed", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	complete(tx, j2.Tasks[1]) // waits for the settling's fold of the second job: a deadlock
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatalf("settling: %v", err)
	}
	var done []int
	var tallies int
	if err := cat.Pool.QueryRow(ctx, `SELECT array_agg(tasks_done ORDER BY id), (SELECT count(*) FROM deckhand.job_tally)
		FROM deckhand.job`).Scan(&done, &tallies); err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 || done[0] != 2 || done[1] != 2 || tallies != 0 {
		t.Fatalf("after the settling: done %v in the jobs' rows, %d tallies left; want [2 2] and none", done, tallies)
	}
}
