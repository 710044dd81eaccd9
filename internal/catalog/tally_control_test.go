package catalog_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// A submitter, who may neither read nor write the tallies, pauses, resumes, cancels and
// retries a job whose done counts wait in tallies: each control folds them (the job's
// trigger runs inside deckhand's functions, as their owner), and the counts stay exact.
func TestSubmitterControlsAJobWithTallies(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	role := "tally_submitter_" + strconv.Itoa(os.Getpid())
	exec(`CREATE ROLE ` + role + ` NOLOGIN IN ROLE deckhand_submitter`)
	t.Cleanup(func() { cat.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) }) //nolint:errcheck

	w := ct.Worker(ctx, t, cat.Pool, nil)
	job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: []ct.TaskOpts{
		{State: TaskDone}, {State: TaskRunning, WorkerID: w}, {State: TaskRunning, WorkerID: w}, {}, {}}})
	// Recorded on the fast path and not settled yet: a task done, counted in a tally.
	tally := func(task ct.TaskRow) {
		t.Helper()
		exec(`WITH t AS (UPDATE deckhand.task SET state = 'done', worker_id = NULL, finished_at = now() WHERE id = $1)
			INSERT INTO deckhand.job_tally AS y (job_id, completer, done) VALUES ($2, $3, 1)
			ON CONFLICT (job_id, completer) DO UPDATE SET done = y.done + 1`, task.ID, job.ID, w)
	}
	tally(job.Tasks[1])

	// as runs sql as the submitter (the session's user stays the test's, which may act on any job).
	as := func(sql string) (string, error) {
		t.Helper()
		var out string
		err := pgx.BeginFunc(ctx, cat.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
				return err
			}
			return tx.QueryRow(ctx, sql).Scan(&out)
		})
		return out, err
	}
	if _, err := as(`SELECT count(*)::text FROM deckhand.job_tally`); err == nil {
		t.Error("the submitter read deckhand.job_tally")
	}
	if _, err := as(`INSERT INTO deckhand.job_tally VALUES (1, 1, 1) RETURNING 'x'`); err == nil {
		t.Error("the submitter wrote deckhand.job_tally")
	}
	check := func(step, wantState string, wantDone int) {
		t.Helper()
		var state string
		var rowDone, seen, real, tallies int
		if err := cat.Pool.QueryRow(ctx, `SELECT j.state, j.tasks_done, v.tasks_done,
				(SELECT count(*) FROM deckhand.task t WHERE t.job_id = j.id AND t.state = 'done'),
				(SELECT count(*) FROM deckhand.job_tally y WHERE y.job_id = j.id)
			FROM deckhand.job j JOIN deckhand.jobs v ON v.id = j.id WHERE j.id = $1`, job.ID).Scan(&state, &rowDone, &seen, &real, &tallies); err != nil {
			t.Fatal(err)
		}
		if state != wantState || rowDone != wantDone || seen != wantDone || real != wantDone || tallies != 0 {
			t.Fatalf("after %s: job %s, %d done in its row, %d seen, %d done tasks, %d tallies; want %s, %d done everywhere, no tally",
				step, state, rowDone, seen, real, tallies, wantState, wantDone)
		}
	}
	control := func(step, sql, wantState string, wantDone int) {
		t.Helper()
		if got, err := as(sql); err != nil || got != wantState {
			t.Fatalf("%s as the submitter: %q (%v), want %s", step, got, err, wantState)
		}
		check(step, wantState, wantDone)
	}
	control("pause", `SELECT deckhand.pause(`+strconv.FormatInt(job.ID, 10)+`)`, "pausing", 2)
	// The running task ends done, through the job's row (its task carries the pause).
	if _, err := cat.Complete(ctx, []catalog.Result{{TaskID: job.Tasks[2].ID, Token: job.Tasks[2].Token, WorkerID: w, Outcome: OutcomeDone}}); err != nil {
		t.Fatal(err)
	}
	check("the last running task", "paused", 3)
	control("resume", `SELECT deckhand.resume(`+strconv.FormatInt(job.ID, 10)+`)`, "running", 3)
	claimed, err := cat.Claim(ctx, w, 2)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %v (%v)", claimed, err)
	}
	tally(ct.TaskRow{ID: claimed[0].ID})
	control("cancel", `SELECT deckhand.cancel(`+strconv.FormatInt(job.ID, 10)+`)`, "cancelling", 4)
	if _, err := cat.Complete(ctx, []catalog.Result{{TaskID: claimed[1].ID, Token: claimed[1].Token, WorkerID: w, Outcome: OutcomeCancelled}}); err != nil {
		t.Fatal(err)
	}
	check("the last cancellation", "cancelled", 4)
	control("retry", `SELECT deckhand.retry(`+strconv.FormatInt(job.ID, 10)+`)`, "running", 4)
}
