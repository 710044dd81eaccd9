//go:build attack

package catalog_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// A worker's batch holds whatever results accumulated while its previous batch was written
// (up to 2,000), not only what its slots run at once. When such a batch is in flight as
// another worker records a job's last task, that completion sees more tasks pending than
// twice what live workers may run plus 100, and does not ask for the settling; if it commits
// last, the job's tasks have all ended and no completion ends it: it waits for the leader.
func TestAttackLastCompletionBehindABigBatchLeavesTheJobRunning(t *testing.T) {
	ctx := context.Background()
	cat, _, _ := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w1, w2 := ct.Worker(ctx, t, cat.Pool, nil), ct.Worker(ctx, t, cat.Pool, nil) // 8 slots each: 132 is "few"
	tasks := []ct.TaskOpts{{State: TaskRunning, WorkerID: w1}}
	for range 200 { // finished on w2's slots while its previous batch was written
		tasks = append(tasks, ct.TaskOpts{State: TaskRunning, WorkerID: w2})
	}
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: tasks})

	begin := func(results []catalog.Result) (pgx.Tx, []int64) {
		t.Helper()
		args, err := catalog.CompleteArgs(results)
		if err != nil {
			t.Fatal(err)
		}
		args["completer"], args["released_by"], args["now"] = results[0].WorkerID, "0", nil
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck
		var applied, runnable int
		var ending []int64
		if err := tx.QueryRow(ctx, catalog.CompleteSQL, pgx.StrictNamedArgs(args)).Scan(&applied, &runnable, &ending); err != nil || applied != len(results) {
			t.Fatalf("complete %d tasks: applied %d (%v)", len(results), applied, err)
		}
		return tx, ending
	}
	var big []catalog.Result
	for _, task := range job.Tasks[1:] {
		big = append(big, catalog.Result{TaskID: task.ID, Token: task.Token, WorkerID: w2, Outcome: OutcomeDone})
	}
	tx2, ending2 := begin(big)
	first := job.Tasks[0]
	tx1, ending1 := begin([]catalog.Result{{TaskID: first.ID, Token: first.Token, WorkerID: w1, Outcome: OutcomeDone}})
	// The big batch commits and settles first, as CompleteAndClaim does; then the last one.
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ending2) > 0 {
		if err := cat.SettleJobs(ctx, ending2); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ending1) > 0 {
		if err := cat.SettleJobs(ctx, ending1); err != nil {
			t.Fatal(err)
		}
	}
	var state string
	var done int
	if err := cat.Pool.QueryRow(ctx, `SELECT state, tasks_done FROM deckhand.jobs WHERE id = $1`, job.ID).Scan(&state, &done); err != nil {
		t.Fatal(err)
	}
	if state != "finished" {
		t.Fatalf("every task of the job is done (%d counted) and both completions settled what they asked to (%v, %v): job %s, want finished without the leader",
			done, ending2, ending1, state)
	}
}
