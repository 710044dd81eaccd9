package move_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// deckhand.move_progress counts the copy of the attempt that copies: an attempt that starts
// the copy over (after an earlier one failed, was released by a pause or died) counts from
// zero, so a move of a schema never shows more tables or rows copied than it has; and
// tables counts what the copy copies (a partitioned table has no rows of its own), so that
// tables_copied reaches it.
func TestMoveProgressCountsOneCopy(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	var rows int64
	conn := e.NodeConn(e.src, pgcluster.Superuser)
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM app.customers) + (SELECT count(*) FROM app.orders)
		+ (SELECT count(*) FROM app.events) + (SELECT count(*) FROM app.counters) + (SELECT count(*) FROM app.notes)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	failed := false
	e.worker(move.Mover{AfterStep: func(_ context.Context, step string) error {
		if step == move.StepCopy && !failed {
			failed = true
			return errors.New("injected failure after the copy")
		}
		return nil
	}})
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(2, "app")})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
	if !failed {
		t.Fatal("no failure was injected")
	}
	progress, ok, err := e.Client.Catalog().MoveProgress(ctx, mustTask(t, e, id))
	if err != nil || !ok {
		t.Fatalf("move progress: %v (found: %v)", err, ok)
	}
	// customers, orders, events_low, events_high, counters, notes: partitions are copied one by one.
	if progress.Tables != 6 {
		t.Errorf("move_progress says the move has %d tables to copy, want 6", progress.Tables)
	}
	if progress.TablesCopied != 6 || progress.RowsCopied != rows {
		t.Errorf("after two copies, move_progress says %d tables and %d rows copied; the schema has 6 tables and %d rows",
			progress.TablesCopied, progress.RowsCopied, rows)
	}
}

// A move cancelled while pg_dump waits on the source (for a lock a long transaction holds)
// leaves no session behind: pg_dump is stopped so that it cancels its query on the server,
// not killed outright, which left its backend queued for the lock until the lock came free.
func TestCancelledMoveLeavesNoDumpSession(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	holder := e.NodeConn(e.src, pgcluster.Superuser)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `LOCK TABLE app.notes IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	probe := e.NodeConn(e.src, pgcluster.Superuser)
	defer probe.Close(ctx)
	waiting := func() int {
		var n int
		if err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'deckhand task %' AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("pg_dump never waited for the lock")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.Client.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, time.Minute); job.State != deckhandtype.JobCancelled {
		t.Fatalf("job %s after cancel", job.State)
	}
	deadline = time.Now().Add(5 * time.Second)
	for n := waiting(); n > 0; n = waiting() {
		if time.Now().After(deadline) {
			t.Fatalf("%d session(s) of the cancelled move still wait for the lock on the source", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A worker killed while its move waited on the source — here CREATE_REPLICATION_SLOT waiting
// for a long transaction to end — leaves a backend that does not notice its client is gone.
// The leader terminates a dead attempt's backend only for tasks that name their node, which a
// move does not; the next attempt of the move ends its predecessors' backends on both nodes
// before anything else, rather than wait on them (and fail, slot "in use").
func TestMoveEndsTheBackendsOfADeadAttempt(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	holder := e.NodeConn(e.src, pgcluster.Superuser)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)                                                                 //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO app.counters VALUES ('held', 0)`); err != nil { // takes a transaction id
		t.Fatal(err)
	}
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(3, "app")})
	p := e.ServeBinary(testenv.Binary(t), nil, "--lease", "1s", "--concurrency", "1")
	probe := e.NodeConn(e.src, pgcluster.Superuser)
	defer probe.Close(ctx)
	slotWaiters := func() []string {
		rows, _ := probe.Query(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE backend_type = 'walsender' AND application_name LIKE 'deckhand task %' AND wait_event = 'transactionid'`)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	deadline := time.Now().Add(time.Minute)
	var dead []string
	for dead = slotWaiters(); len(dead) == 0; dead = slotWaiters() {
		if time.Now().After(deadline) {
			t.Fatalf("the move never waited to create its slot: %s\n%s", e.lastError(id), p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Wait() //nolint:errcheck
	e.worker(move.Mover{})
	deadline = time.Now().Add(30 * time.Second)
	for {
		left := slotWaiters()
		if !slices.ContainsFunc(left, func(n string) bool { return slices.Contains(dead, n) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead attempt's walsender (%v) still waits on the source: %s", dead, e.lastError(id))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
}

// A running move shows where it stands in the job's progress (deckhand.task_progress, which
// `job show`, `job wait` and the dashboard read): its step, and the tables copied of those
// its copy copies.
func TestRunningMoveShowsItsStep(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	atIndexes, goOn := make(chan struct{}), make(chan struct{})
	e.worker(move.Mover{AfterStep: func(ctx context.Context, step string) error {
		if step == move.StepIndexes {
			close(atIndexes)
			select {
			case <-goOn:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(2, "app")})
	select {
	case <-atIndexes:
	case <-time.After(2 * time.Minute):
		t.Fatal("the move did not reach its indexes step")
	}
	progress, err := e.Client.Catalog().JobProgress(ctx, id)
	close(goOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 1 || progress[0].Command != "MOVE" || progress[0].Phase != move.StepIndexes ||
		progress[0].Done != 6 || progress[0].Total != 6 || progress[0].Unit != "tables" {
		t.Fatalf("progress of the running move: %+v; want MOVE at %s, 6 of 6 tables", progress, move.StepIndexes)
	}
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
	if progress, err := e.Client.Catalog().JobProgress(ctx, id); err != nil || len(progress) != 0 {
		t.Errorf("progress of the finished move: %+v (%v); want none", progress, err)
	}
}
