package logicalapply_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// startRun runs an applier on fresh connections until the test ends; Run's result arrives
// on the channel.
func (e *env) startRun(ctx context.Context) (*logicalapply.Applier, <-chan error) {
	e.t.Helper()
	src, dst, err := e.conns(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	a := logicalapply.New(logicalapply.Config{Source: src, Slot: e.slot, Publication: e.pub, Target: dst,
		ProgressTable: e.progress, Logger: testLogger()})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		done <- a.Run(runCtx, e.consistent)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-exited // the connections are the run's until it returns
		src.Close(context.Background())
		dst.Close(context.Background())
	})
	return a, done
}

func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
		return nil
	}
}

// A change the target refuses ends the run with a permanent ApplyError naming the relation
// and the change's position; the target keeps nothing of that source transaction.
func TestTargetRefusalIsAPermanentApplyError(t *testing.T) {
	for _, c := range []struct {
		name, target, source, op, relation string
	}{
		{"constraint", `ALTER TABLE app.docs ADD CONSTRAINT small CHECK (id < 500)`,
			`INSERT INTO app.docs VALUES (600, '{}', NULL)`, "INSERT", "app.docs"},
		{"missing table", `DROP TABLE app.scratch`,
			`INSERT INTO app.scratch VALUES (1, 'x')`, "resolve", "app.scratch"},
		{"missing column", `ALTER TABLE app.docs DROP COLUMN tags`,
			`UPDATE app.docs SET tags = '{a}' WHERE id = 1`, "resolve", "app.docs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := pgtest.Context(t, 2*time.Minute)
			e.ownerExec(e.dst, c.target)
			// A transaction that applies, then the one that cannot.
			e.ownerExec(e.src, `INSERT INTO app."Keyed Table" VALUES ('before', 1)`)
			e.ownerExec(e.src, `BEGIN; INSERT INTO app."Keyed Table" VALUES ('same transaction', 1); `+c.source+`; COMMIT`)
			_, done := e.startRun(ctx)
			err := waitRun(t, done)
			var ae *logicalapply.ApplyError
			if !errors.As(err, &ae) {
				t.Fatalf("Run returned %v, want an ApplyError", err)
			}
			if taskerr.Retryable(err) {
				t.Errorf("%v is retryable", err)
			}
			if ae.Op != c.op || ae.Relation != c.relation || ae.LSN == 0 || ae.CommitLSN == 0 {
				t.Errorf("ApplyError %+v: want %s of %s with positions", ae, c.op, c.relation)
			}
			t.Log(err)
			dst := e.ownerConn(e.dst)
			var keys []string
			rows, err := dst.Query(ctx, `SELECT "K" FROM app."Keyed Table" WHERE v = 1 AND "K" IN ('before', 'same transaction') ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k string
				_ = rows.Scan(&k)
				keys = append(keys, k)
			}
			if strings.Join(keys, ",") == "before,same transaction" || rows.Err() != nil {
				t.Errorf("the refused transaction's other change is on the target: %v (%v)", keys, rows.Err())
			}
			applied, err := logicalapply.AppliedLSN(ctx, dst, e.progress)
			if err != nil || applied >= ae.CommitLSN {
				t.Errorf("progress %s (%v), the refused transaction commits at %s", applied, err, ae.CommitLSN)
			}
		})
	}
}

// A progress row that moved under a running applier (another applier wrote it) stops the
// run before it applies anything more, with a retryable error.
func TestMovedProgressRowStopsTheRun(t *testing.T) {
	e := newEnv(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	a, done := e.startRun(ctx)
	e.ownerExec(e.src, `INSERT INTO app.scratch VALUES (1, 'one')`)
	if err := a.WaitApplied(ctx, e.sourceLSN()); err != nil {
		t.Fatal(err)
	}
	e.ownerExec(e.dst, `UPDATE "deckhand apply".progress SET lsn = lsn + 1`)
	e.ownerExec(e.src, `INSERT INTO app.scratch VALUES (2, 'two')`)
	err := waitRun(t, done)
	var ae *logicalapply.ApplyError
	if err == nil || errors.As(err, &ae) || !taskerr.Retryable(err) || !strings.Contains(err.Error(), "another applier") {
		t.Fatalf("Run returned %v, want a retryable error about another applier", err)
	}
	var n int
	if err := e.ownerConn(e.dst).QueryRow(ctx, `SELECT count(*) FROM app.scratch WHERE id = 2`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the change after the progress row moved was applied (%d, %v)", n, err)
	}
}

// WaitApplied gives up when its context ends, and returns at once for a position applied.
func TestWaitAppliedHonoursItsContext(t *testing.T) {
	a := logicalapply.New(logicalapply.Config{})
	if err := a.WaitApplied(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.WaitApplied(ctx, 0x1000); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitApplied without a run returned %v", err)
	}
}

// An insert position just past a page header is reached at the page's start: no record
// starts inside a header, and the source's position stops at the boundary.
func TestPageHeaderCountsAsReached(t *testing.T) {
	for _, c := range []struct {
		applied, lsn pglogrepl.LSN
		want         bool
	}{
		{0x3000000, 0x3000028, true},  // a segment's first page: long header
		{0x3002000, 0x3002018, true},  // another page: short header
		{0x3002000, 0x3002029, false}, // past any header: a record there is not applied
		{0x3001ff0, 0x3002018, false}, // not at a page start
		{0x3002018, 0x3002018, true},
	} {
		a := logicalapply.New(logicalapply.Config{})
		a.SetAppliedForTest(c.applied)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := a.WaitApplied(ctx, c.lsn)
		cancel()
		if (err == nil) != c.want {
			t.Errorf("applied %s, waiting for %s: %v", c.applied, c.lsn, err)
		}
	}
}

// A stale session holding the progress row (a run whose backend outlived its client) makes
// the next run fail, retryably, after the lock timeout instead of hanging; once the stale
// session is gone, a run resumes.
func TestStaleSessionHoldingTheProgressRow(t *testing.T) {
	e := newEnv(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	stale := e.ownerConn(e.dst)
	if _, err := stale.Exec(ctx, `BEGIN; SELECT * FROM "deckhand apply".progress FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	src, dst, err := e.conns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	defer dst.Close(context.Background())
	a := logicalapply.New(logicalapply.Config{Source: src, Slot: e.slot, Publication: e.pub, Target: dst,
		ProgressTable: e.progress, Logger: testLogger(), LockTimeout: 300 * time.Millisecond})
	e.ownerExec(e.src, `INSERT INTO app.scratch VALUES (1, 'one')`)
	start := time.Now()
	err = a.Run(ctx, e.consistent)
	if err == nil || !taskerr.Retryable(err) || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("Run returned %v, want a retryable lock timeout", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Run took %s to give up", d)
	}
	if _, err := stale.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	src.Close(context.Background())
	e.waitSlotInactive()
	b, done := e.startRun(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("the resumed run ended: %v", err)
			cancel()
		}
	}()
	if err := b.WaitApplied(waitCtx, e.sourceLSN()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.ownerConn(e.dst).QueryRow(ctx, `SELECT count(*) FROM app.scratch WHERE id = 1`).Scan(&n); err != nil || n != 1 {
		t.Errorf("after the stale session ended: %d rows (%v)", n, err)
	}
}
