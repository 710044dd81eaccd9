package logicalapply_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// memLog keeps the applier's debug records of a test, shown when contents differ.
var memLog struct {
	sync.Mutex
	buf bytes.Buffer
}

func memLogTail(n int) string {
	memLog.Lock()
	defer memLog.Unlock()
	lines := strings.Split(memLog.buf.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

type memWriter struct{}

func (memWriter) Write(p []byte) (int, error) {
	memLog.Lock()
	defer memLog.Unlock()
	return memLog.buf.Write(p)
}

func testLogger() *slog.Logger {
	if os.Getenv("LOGICALAPPLY_MEMLOG") != "" {
		return slog.New(slog.NewTextHandler(memWriter{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	level := slog.LevelWarn
	if os.Getenv("LOGICALAPPLY_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// The applier keeps up with a writer of every kind of change, as a role that is no
// superuser, and once the writer stops and the target caught up, every table holds the same
// rows on both sides.
func TestApplyCatchesUp(t *testing.T) {
	e := newEnv(t)
	ctx := pgtest.Context(t, 3*time.Minute)

	// The owner holds nothing but its own objects, REPLICATION and CREATE on the databases.
	var attrs string
	owner := pgtest.Connect(t, e.c.DSN(e.dst, e.owner))
	err := owner.QueryRow(ctx, `SELECT concat_ws(',', CASE WHEN rolsuper THEN 'superuser' END, CASE WHEN rolcreaterole THEN 'createrole' END,
			CASE WHEN rolcreatedb THEN 'createdb' END, CASE WHEN rolbypassrls THEN 'bypassrls' END, CASE WHEN NOT rolreplication THEN 'no replication' END,
			(SELECT string_agg(roleid::regrole::text, ',') FROM pg_catalog.pg_auth_members WHERE member = r.oid))
		FROM pg_catalog.pg_roles r WHERE rolname = current_user`).Scan(&attrs)
	if err != nil || attrs != "" {
		t.Fatalf("the owner has %q (%v)", attrs, err)
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
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		runErr <- a.Run(runCtx, e.consistent)
	}()
	defer func() { stopRun(); <-exited }() // before the connections close

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
	// Config.Applied hears a position before Applied() shows it (the run goes on meanwhile).
	if applied := a.Applied(); rec.lastLSN() < applied {
		t.Errorf("Config.Applied last heard %s, Applied() was %s", rec.lastLSN(), applied)
	}

	// An idle source: the applied position follows its WAL without any change to apply —
	// here WAL written for another database, which the slot decodes but sends nothing of.
	idle := e.sourceLSN()
	e.superExec("postgres", "CREATE TEMP TABLE other_db_traffic AS SELECT g FROM generate_series(1, 1000) g")
	after := e.sourceLSN()
	if after <= idle {
		t.Fatalf("WAL did not move: %s then %s", idle, after)
	}
	start = time.Now()
	if err := a.WaitApplied(waitCtx, after); err != nil {
		t.Fatalf("idle source: waiting for %s (applied %s): %v", after, a.Applied(), err)
	}
	t.Logf("idle source: applied %s, %s after the WAL moved", a.Applied(), time.Since(start))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("idle source: caught up after %s; the source should have been asked", d)
	}

	stopRun()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v after its context ended", err)
	}
	// The slot hears what the target applied (the run's last status update), and no more.
	conn := pgtest.Connect(t, e.c.DSN(e.src, pgcluster.Superuser))
	var confirmed pglogrepl.LSN
	testenv.Eventually(t, 10*time.Second, func() bool {
		var s string
		if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		confirmed, _ = pglogrepl.ParseLSN(s)
		return confirmed >= a.Applied()
	}, "the slot confirms the applied position")
	if confirmed != a.Applied() {
		t.Errorf("slot confirmed %s, applied %s", confirmed, a.Applied())
	}
}
