package catalog_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// A big batch in flight while another worker records a job's last task: whichever commits
// last ends the job right after its commit, however many tasks the other one held.
func TestLastCompletionBehindABigBatchEndsTheJob(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	w1, w2 := ct.Worker(ctx, t, cat.Pool, nil), ct.Worker(ctx, t, cat.Pool, nil) // 8 slots each: 132 is "few"
	tasks := []ct.TaskOpts{{State: TaskRunning, WorkerID: w1}}
	for range 200 { // finished on w2's slots while its previous batch was written
		tasks = append(tasks, ct.TaskOpts{State: TaskRunning, WorkerID: w2})
	}
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: tasks})

	begin := func(results []catalog.Result) pgx.Tx {
		t.Helper()
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck
		completeIn(t, tx, results)
		return tx
	}
	settleEnded := func(results []catalog.Result) {
		t.Helper()
		ids := make([]int64, len(results))
		for i, r := range results {
			ids[i] = r.TaskID
		}
		if _, err := cat.Pool.Exec(ctx, `SELECT deckhand.settle_ended($1::bigint[])`, ids); err != nil {
			t.Fatal(err)
		}
	}
	var big []catalog.Result
	for _, task := range job.Tasks[1:] {
		big = append(big, catalog.Result{TaskID: task.ID, Token: task.Token, WorkerID: w2, Outcome: OutcomeDone})
	}
	tx2 := begin(big)
	first := job.Tasks[0]
	last := []catalog.Result{{TaskID: first.ID, Token: first.Token, WorkerID: w1, Outcome: OutcomeDone}}
	tx1 := begin(last)
	// The big batch commits and settles first, as CompleteAndClaim does; then the last one.
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	settleEnded(big)
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	settleEnded(last)
	var state string
	var done int
	if err := cat.Pool.QueryRow(ctx, `SELECT state, tasks_done FROM deckhand.jobs WHERE id = $1`, job.ID).Scan(&state, &done); err != nil {
		t.Fatal(err)
	}
	if state != "finished" {
		t.Fatalf("every task of the job is done (%d counted) and both completions settled: job %s, want finished without the leader", done, state)
	}
}
