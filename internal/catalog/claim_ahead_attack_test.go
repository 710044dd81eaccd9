package catalog_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Every writer of task rows locks them in id order (deckhand.cancel, pause, resume, the
// completion's own locked CTE). A completion that hands a slot to a task claimed ahead locks
// that task's row after the rows of its results: when the task claimed ahead has the lower id
// (a retried or resumed task claimed ahead behind a newer one of its job), a cancel of the job
// that comes meanwhile must not fail with a deadlock.
func TestHandOverDoesNotDeadlockACancel(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES
			('n', 'host=/nonexistent', 'n', 'primary', 1), ('m', 'host=/nonexistent', 'm', 'primary', 1),
			('o', 'host=/nonexistent', 'o', 'primary', 1);
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('one', 'sql', 2) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, not_before)
		SELECT j.id, v.name, 'sql', 'n', 'app', 'SELECT 1', 3, '1 hour', 'runnable', v.not_before
		FROM j, (VALUES ('b', now() + interval '1 hour'), ('a', now())) v(name, not_before) ORDER BY v.name DESC;
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('two', 'sql', 2) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, v.name, 'sql', v.node, 'app', 'SELECT 1', 3, '1 hour', 'runnable'
		FROM j, (VALUES ('d', 'm'), ('e', 'o')) v(name, node) ORDER BY v.name`)
	const worker = 1
	byName := map[string]deckhandtype.ClaimedTask{}
	got, err := cat.Claim(ctx, worker, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got {
		byName[c.Name] = c
	}
	if len(got) != 3 || byName["a"].ID == 0 || byName["d"].ID == 0 || byName["e"].ID == 0 {
		t.Fatalf("claimed %+v, want a, d and e", got)
	}
	// b, older than a (as a task retried after its backoff would be), becomes runnable, and is
	// claimed ahead of a's slot.
	exec(`UPDATE deckhand.task SET not_before = now() - interval '1 second' WHERE name = 'b'`)
	done := func(c deckhandtype.ClaimedTask) catalog.Result {
		return catalog.Result{TaskID: c.ID, Token: c.Token, WorkerID: worker, Outcome: deckhandtype.OutcomeDone}
	}
	_, got, err = cat.CompleteAndClaimAhead(ctx, []catalog.Result{done(byName["e"])}, worker, 10, catalog.Ahead{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "b" || !got[0].Queued {
		t.Fatalf("claimed %+v, want b ahead", got)
	}
	b, a, d := got[0], byName["a"], byName["d"]
	if b.ID > a.ID {
		t.Fatalf("b (%d) has a higher id than a (%d)", b.ID, a.ID)
	}
	var jobOne int64
	if err := cat.Pool.QueryRow(ctx, `SELECT job_id FROM deckhand.task WHERE id = $1`, a.ID).Scan(&jobOne); err != nil {
		t.Fatal(err)
	}

	// Someone holds d's row a moment (any writer of job two), so the completion of a and d,
	// a handing its slot to b, waits there holding a.
	hold, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT FROM deckhand.task WHERE id = $1 FOR UPDATE`, d.ID); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		var n int
		if err := cat.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	until := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); waiting() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d sessions wait for a lock, want %d", what, waiting(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	completed := make(chan error, 1)
	go func() {
		ra := done(a)
		ra.HandedTo, ra.HandedToken = b.ID, b.Token
		_, err := cat.Complete(ctx, []catalog.Result{ra, done(d)})
		completed <- err
	}()
	until(1, "the completion waits for d")
	cancelled := make(chan error, 1)
	go func() {
		_, err := cat.CancelJob(ctx, jobOne)
		cancelled <- err
	}()
	until(2, "the cancel waits for a")
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Errorf("cancel of job %d: %v", jobOne, err)
	}
	if err := <-completed; err != nil {
		t.Errorf("completion: %v", err)
	}
}
