package catalog_test

import (
	"context"
	"testing"
	"time"
)

// A job's first claim marks it started without waiting for its row: concurrent first claims
// of one job used to queue for the row, each behind the whole transaction of the one before.
// With the row held by another transaction (here an open one that locked it, as a pause does),
// the claim takes the task at once and leaves the mark; the job's next claim, once the row is
// free, makes it.
func TestFirstClaimDoesNotWaitForTheJobRow(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 2, 'infinity')`)
	var jobID int64
	if err := cat.Pool.QueryRow(ctx, `WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('two', 'noop', 2) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'noop', 'app', 3, '1 hour', 'runnable' FROM j, generate_series(1, 2) g RETURNING job_id`).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	started := func() (bool, string) {
		t.Helper()
		var isStarted bool
		var state string
		if err := cat.Pool.QueryRow(ctx, `SELECT started_at IS NOT NULL, state FROM deckhand.job WHERE id = $1`, jobID).Scan(&isStarted, &state); err != nil {
			t.Fatal(err)
		}
		return isStarted, state
	}

	holder, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT 1 FROM deckhand.job WHERE id = $1 FOR NO KEY UPDATE`, jobID); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	began := time.Now()
	first, err := cat.Claim(cctx, 1, 1)
	if err != nil {
		t.Fatalf("a claim with the job's row held by another transaction: %v (after %s)", err, time.Since(began))
	}
	if len(first) != 1 {
		t.Fatalf("claimed %d tasks, want 1", len(first))
	}
	if isStarted, state := started(); isStarted || state != "scheduled" {
		t.Fatalf("job started %v, state %q while its row was held; want the mark left to a later claim", isStarted, state)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	second, err := cat.Claim(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 1 || second[0].ID == first[0].ID {
		t.Fatalf("the second claim took %v, want the job's other task", second)
	}
	if isStarted, state := started(); !isStarted || state != "running" {
		t.Fatalf("after the job's next claim: started %v, state %q; want started and running", isStarted, state)
	}
}
