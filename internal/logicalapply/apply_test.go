package logicalapply_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// The applier keeps up with a writer of every kind of change, as a role that is no
// superuser, and once the writer stops and the target caught up, every table holds the same
// rows on both sides.
func TestApplyCatchesUp(t *testing.T) {
	e := newEnv(t)
	ctx := pgtest.Context(t, 3*time.Minute)

	var super bool
	owner := pgtest.Connect(t, e.c.DSN(e.dst, e.owner))
	if err := owner.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil || super {
		t.Fatalf("the owner must not be a superuser (%v, %v)", super, err)
	}

	src, dst, err := e.conns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	defer dst.Close(context.Background())
	rec := &appliedRecorder{}
	a := logicalapply.New(logicalapply.Config{Source: src, Slot: e.slot, Publication: e.pub, Target: dst,
		ProgressTable: e.progress, Applied: rec.applied, Logger: testLogger()})
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(runCtx, e.consistent) }()

	stop := e.writer(1)
	time.Sleep(3 * time.Second)
	n := stop()
	lsn := e.sourceLSN()
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := a.WaitApplied(waitCtx, lsn); err != nil {
		select {
		case err := <-runErr:
			t.Fatalf("run ended: %v", err)
		default:
		}
		t.Fatalf("waiting for %s (applied %s): %v", lsn, a.Applied(), err)
	}
	t.Logf("writer committed %d transactions; caught up with %s %s after it stopped; %+v", n, lsn, time.Since(start), a.Stats())
	e.sameContents()

	st := a.Stats()
	if st.UnchangedToast == 0 {
		t.Error("no update left an unchanged TOASTed value alone: the test does not prove it")
	}
	if st.MissingUpdates != 0 {
		t.Errorf("%d updates found no row", st.MissingUpdates)
	}
	if st.Transactions == 0 || st.Changes == 0 {
		t.Errorf("stats %+v", st)
	}
	if got, err := logicalapply.AppliedLSN(ctx, owner, e.progress); err != nil || got == 0 || got > a.Applied() {
		t.Errorf("progress table at %s (%v), applied %s", got, err, a.Applied())
	}
	if rec.lastLSN() != a.Applied() {
		t.Errorf("Config.Applied last heard %s, Applied() is %s", rec.lastLSN(), a.Applied())
	}

	// An idle source: the applied position follows its WAL without any change to apply.
	idle := e.sourceLSN()
	e.superExec(e.src, "SELECT pg_catalog.pg_switch_wal()") // WAL moves, no published change
	after := e.sourceLSN()
	if after <= idle {
		t.Fatalf("WAL did not move: %s then %s", idle, after)
	}
	start = time.Now()
	if err := a.WaitApplied(waitCtx, after); err != nil {
		t.Fatalf("idle source: waiting for %s (applied %s): %v", after, a.Applied(), err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("idle source: caught up after %s; the source should have been asked", d)
	}

	stopRun()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v after its context ended", err)
	}
	// The slot was told what the target applied, and no more.
	var confirmed string
	conn := pgtest.Connect(t, e.c.DSN(e.src, pgcluster.Superuser))
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot confirmed %s, applied %s", confirmed, a.Applied())
}
