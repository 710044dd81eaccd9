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

// A settling of several jobs beside a completion that writes tallies of the same jobs: it
// passes the tally the completion holds and settles each job in a transaction of its own, so
// neither waits for the other, and the counts add up once both have settled.
func TestSettlingBesideACompletionOfTheSameJobs(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
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
		completeIn(t, tx, []catalog.Result{{TaskID: task.ID, Token: task.Token, WorkerID: w, Outcome: OutcomeDone}})
	}
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	complete(tx, j1.Tasks[1])

	// The settling passes the first job's tally, which the completion holds, and folds the
	// second's: it neither waits for the completion nor holds a row the completion then needs.
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cat.SettleJobs(quick, []int64{j1.ID, j2.ID}); err != nil {
		t.Fatalf("settling beside the completion: %v", err)
	}
	complete(tx, j2.Tasks[1])
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The completion settles what it may have ended once it has committed.
	if err := cat.SettleJobs(ctx, []int64{j1.ID, j2.ID}); err != nil {
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
