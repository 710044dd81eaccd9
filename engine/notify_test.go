package engine_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/notifier"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

var noopJob = &spec.Job{Tasks: []spec.Task{{Name: "t", Kind: spec.KindNoop}}}

// waitDone waits for a job to end within d, which is far shorter than the worker's poll in
// these tests: only a notification, or a resync, can have woken the worker in time.
func waitDone(t *testing.T, e *testenv.Env, id int64, d time.Duration, what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := e.Client.Wait(wctx, id, nil); err != nil {
		t.Fatalf("%s: job %d did not end within %s: %v", what, id, d, err)
	}
}

func terminate(t *testing.T, e *testenv.Env, pid uint32) {
	t.Helper()
	var ok bool
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating backend %d: %v %v", pid, ok, err)
	}
}

// In `deckhand serve` the worker, its cleaner and the API share one notifier. When its
// connection is killed, work submitted while it is down (whose notification is lost) is
// picked up on the resync, every subscriber is told to resync, and notifications wake the
// worker again once it is back.
func TestWorkerSurvivesTheLossOfTheNotifierConnection(t *testing.T) {
	e := testenv.New(t)
	cat, err := catalog.Open(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	n := notifier.New(cat.Pool.Config().ConnConfig, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// A long first backoff keeps the notifier down while a job is submitted.
	n.MinBackoff = 2 * time.Second
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(runCtx) }()
	defer func() { stop(); <-done }()

	events := n.Subscribe(1, catalog.ChannelJob) // as an API event stream does
	defer events.Close()
	e.Worker(engine.Config{Notifier: n, PollInterval: time.Hour})
	select {
	case <-events.Resync():
	case <-time.After(10 * time.Second):
		t.Fatal("no first resync")
	}
	waitDone(t, e, submit(t, e, noopJob), 5*time.Second, "before the connection is lost")

	pid := n.PID()
	terminate(t, e, pid)
	testenv.Eventually(t, 5*time.Second, func() bool { return n.PID() == 0 }, "the notifier notices its connection is gone")
	lost := submit(t, e, noopJob) // its NOTIFY reaches nobody
	select {
	case <-events.Resync():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber was not told to resync after the reconnect")
	}
	if now := n.PID(); now == 0 || now == pid {
		t.Errorf("notifier backend after the reconnect: %d (was %d)", now, pid)
	}
	waitDone(t, e, lost, 5*time.Second, "submitted while the notifier was down")
	waitDone(t, e, submit(t, e, noopJob), 2*time.Second, "after the reconnect")
}

// A worker made without a notifier opens exactly one listening connection, which its cleaner
// shares, and reconnects it on its own.
func TestBareWorkerListensOnOneConnectionAndReconnects(t *testing.T) {
	e := testenv.New(t)
	w, _ := e.Worker(engine.Config{PollInterval: time.Hour})
	testenv.Eventually(t, 10*time.Second, w.Leading, "the worker leads, so its cleaner runs")
	listeners := func() []uint32 {
		rows, err := e.Pool(e.DB).Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'deckhand notifier'`)
		if err != nil {
			t.Fatal(err)
		}
		var pids []uint32
		for rows.Next() {
			var pid uint32
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	waitDone(t, e, submit(t, e, noopJob), 5*time.Second, "before the connection is lost")
	pids := listeners()
	if len(pids) != 1 {
		t.Fatalf("the worker and its cleaner listen on %d connections, want 1", len(pids))
	}
	terminate(t, e, pids[0])
	testenv.Eventually(t, 10*time.Second, func() bool {
		now := listeners()
		return len(now) == 1 && now[0] != pids[0]
	}, "the notifier reconnects")
	// The new connection may not listen yet; the resync that follows picks the job up.
	waitDone(t, e, submit(t, e, noopJob), 5*time.Second, "after the reconnect")
}
