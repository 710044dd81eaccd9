package logicalapply_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

var errInjected = errors.New("injected: the catalog is unreachable")

// kills are the ways a run is stopped in TestApplyResumesExactlyAfterKills.
var kills = []string{
	"cancel the run",
	"drop the replication connection",
	"terminate the target backend mid-transaction",
	"terminate the walsender",
	"fail Config.Applied after a target commit",
	"drop the target connection",
}

// Runs stopped at random instants in every way a run can die — while a writer keeps
// changing the source — and resumed with fresh connections, end with the same rows on both
// sides: nothing applied twice (an insert would fail, a foreign key would break), nothing
// lost, and no change ever refused by the target.
func TestApplyResumesExactlyAfterKills(t *testing.T) {
	e := newEnv(t)
	ctx := pgtest.Context(t, 5*time.Minute)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	superDst := pgtest.Connect(t, e.c.DSN(e.dst, pgcluster.Superuser))
	superSrc := pgtest.Connect(t, e.c.DSN(e.src, pgcluster.Superuser))

	rec := &appliedRecorder{}
	a := logicalapply.New(logicalapply.Config{Slot: e.slot, Publication: e.pub, ProgressTable: e.progress,
		Applied: rec.applied, Logger: testLogger(), MaxBatchChanges: 1 + rnd.IntN(300)})
	stop := e.writer(seed)

	killed := map[string]int{}
	behind := 0      // runs that started with the slot behind the target
	killedMidTx := 0 // target backends terminated with a transaction open
	const rounds = 30
	for round := range rounds {
		src, dst, err := e.conns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.Use(src, dst)
		// Every other run asks the source for all it holds past the slot's position, so
		// that the skip of what the target has is proven too, not only the source's.
		a.StreamFromSlotForTest(round%2 == 1)
		applied, err := logicalapply.AppliedLSN(ctx, dst, e.progress)
		if err != nil {
			t.Fatal(err)
		}
		var confirmed pglogrepl.LSN
		if err := superSrc.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&confirmed); err != nil {
			t.Fatal(err)
		}
		if confirmed < applied {
			behind++ // the slot would send again what the target has: the run must skip it
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx, max(applied, e.consistent)) }()

		kill := kills[round%len(kills)]
		// Stop it after some changes or some time, whichever comes first.
		from, changes := a.Stats().Changes, int64(1+rnd.IntN(400))
		deadline := time.Now().Add(time.Duration(20+rnd.IntN(500)) * time.Millisecond)
		ended := false
		for !ended && a.Stats().Changes-from < changes && time.Now().Before(deadline) {
			select {
			case err := <-done:
				done <- err
				ended = true
			case <-time.After(2 * time.Millisecond):
			}
		}
		midTx := false
		if !ended {
			switch kill {
			case "cancel the run":
				cancel()
			case "drop the replication connection":
				_ = src.Conn().Close()
			case "terminate the target backend mid-transaction":
				pid := dst.PgConn().PID()
				for i := 0; i < 1000 && !midTx; i++ {
					var state string
					if err := superDst.QueryRow(ctx, `SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&state); err != nil {
						t.Fatal(err)
					}
					midTx = state == "idle in transaction" || state == "active"
				}
				if _, err := superDst.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
					t.Fatal(err)
				}
			case "terminate the walsender":
				// The run's walsender, once it holds the slot (it may still be starting).
				for i := 0; i < 1000; i++ {
					var terminated bool
					if err := superSrc.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot).Scan(&terminated); err != nil {
						t.Fatal(err)
					}
					if terminated {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			case "fail Config.Applied after a target commit":
				rec.setFail(errInjected)
			case "drop the target connection":
				_ = dst.PgConn().Conn().Close()
			}
		}
		var runErr error
		select {
		case runErr = <-done:
		case <-time.After(time.Minute):
			cancel()
			<-done
			t.Fatalf("round %d (%s): Run did not return", round, kill)
		}
		cancel()
		rec.setFail(nil)
		var applyErr *logicalapply.ApplyError
		if errors.As(runErr, &applyErr) || (runErr != nil && !taskerr.Retryable(runErr)) {
			t.Fatalf("round %d (%s): the target refused a change: %v", round, kill, runErr)
		}
		if !ended {
			killed[kill]++
		}
		if midTx {
			killedMidTx++
		}
		t.Logf("round %d: %s (mid-transaction %v, ended before %v): %v; applied %s, %+v", round, kill, midTx, ended, oneLine(errString(runErr)), a.Applied(), a.Stats())
		src.Close(context.Background())
		dst.Close(context.Background())
		if ended {
			time.Sleep(100 * time.Millisecond) // a walsender still holding the slot exits
		}
	}
	n := stop()

	// A last run catches up with everything the writer did.
	lsn := e.sourceLSN()
	var last error
	for attempt := 0; ; attempt++ {
		src, dst, err := e.conns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.Use(src, dst)
		applied, err := logicalapply.AppliedLSN(ctx, dst, e.progress)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx, max(applied, e.consistent)) }()
		waitCtx, cancelWait := context.WithTimeout(ctx, time.Minute)
		waited := make(chan error, 1)
		go func() { waited <- a.WaitApplied(waitCtx, lsn) }()
		select {
		case err := <-waited:
			cancelWait()
			cancel()
			<-done
			src.Close(context.Background())
			dst.Close(context.Background())
			if err != nil {
				t.Fatalf("waiting for %s (applied %s): %v", lsn, a.Applied(), err)
			}
		case last = <-done:
			cancelWait()
			cancel()
			src.Close(context.Background())
			dst.Close(context.Background())
			if attempt < 20 {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			t.Fatalf("final run: %v", last)
		}
		break
	}
	st := a.Stats()
	t.Logf("writer committed %d transactions; kills %v; %d runs started with the slot behind the target; %+v", n, killed, behind, st)
	e.sameContents()
	if st.MissingUpdates != 0 {
		t.Errorf("%d updates found no row: something was applied out of order or twice", st.MissingUpdates)
	}
	if st.Skipped == 0 {
		t.Error("no run skipped a transaction the target had applied: the skip was not exercised")
	}
	if behind == 0 {
		t.Error("no run started with the slot behind the target: resuming past what the slot resends was not exercised")
	}
	if killedMidTx == 0 {
		t.Error("no target backend was terminated with a transaction open")
	}
	for _, k := range kills {
		if killed[k] == 0 {
			t.Errorf("no run was stopped by %q", k)
		}
	}
}

func (r *appliedRecorder) setFail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.fail = nil
		return
	}
	r.fail = func(int) error { return err }
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
