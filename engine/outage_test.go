package engine_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// SIGTERM while the catalog is down and a task runs: serve gives the task its grace, cancels
// it, tries to record the result for --shutdown-record-timeout and exits 1, naming in one log
// line the attempt it leaves to the leader. Once the catalog is back, a new worker's leader
// rescues that attempt and the task runs to the end.
func TestSIGTERMWithTheCatalogDown(t *testing.T) {
	e := testenv.NewRestartable(t, pgcluster.Options{})
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE gate (open boolean); INSERT INTO gate VALUES (false); CREATE TABLE runs (n int)`)
	const grace = 2 * time.Second
	serve := e.Serve("--lease", "2s", "--maintenance-interval", "100ms",
		"--shutdown-grace", grace.String(), "--shutdown-record-timeout", "3s")
	// The first attempt waits for the gate, as good as forever; the rescued one finds it open.
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", MaxAttempts: 3, SQL: `
		SELECT pg_sleep(600) FROM gate WHERE NOT open;
		INSERT INTO runs VALUES (1)`}}})
	first := runningAttempt(t, e, id)
	waitSleeping(t, e, db, 1)

	if err := e.CatalogCluster.Shutdown(); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, exited := serve.Exit(grace + 10*time.Second)
	took := time.Since(signalled)
	if !exited {
		t.Fatalf("serve still runs %s after SIGTERM with the catalog down", took.Round(time.Millisecond))
	}
	t.Logf("serve exited %d, %s after SIGTERM; its output:\n%s", code, took.Round(time.Millisecond), serve.Output())
	if code == 0 {
		t.Errorf("serve exited 0, though it could not record the task's result")
	}
	if took < grace {
		t.Errorf("serve exited %s after SIGTERM, before the task's grace of %s", took, grace)
	}
	named := fmt.Sprintf("task %d/token %d", first.TaskID, first.Token)
	var lines []string
	for _, line := range strings.Split(serve.Output(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, named) {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "leader") {
		t.Errorf("want one error line naming %s for the leader to rescue, got %q\noutput:\n%s", named, lines, serve.Output())
	}

	// A wait begun while the catalog is down waits for it.
	waiter := e.Start("job", "wait", fmt.Sprint(id))
	e.Exec(db, `UPDATE gate SET open = true`)
	time.Sleep(time.Second)
	if err := e.CatalogCluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.Serve("--lease", "2s", "--maintenance-interval", "100ms")
	if job := e.Wait(id, time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s after the rescue", job.State)
	}
	if code, exited := waiter.Exit(10 * time.Second); !exited || code != 0 {
		t.Errorf("deckhand job wait, begun with the catalog down: exited %v with %d, want 0\n%s", exited, code, waiter.Output())
	}
	d := detail(t, e, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Token != first.Token || d.Attempts[0].Outcome != deckhandtype.OutcomeLost ||
		d.Attempts[1].Outcome != deckhandtype.OutcomeDone {
		t.Fatalf("attempts = %+v, want the first (token %d) lost, then one done", d.Attempts, first.Token)
	}
	var runs int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&runs); err != nil || runs != 1 {
		t.Errorf("the task's work committed %d times (%v), want once", runs, err)
	}
}

// A second SIGTERM ends serve at once, without waiting out the grace.
func TestSecondSignalEndsServeAtOnce(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	serve := e.Serve("--shutdown-grace", "1m")
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", SQL: "SELECT pg_sleep(600)"}}})
	waitSleeping(t, e, db, 1)
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(serve.Output(), "shutting down") }, "serve starts its shutdown")
	if _, exited := serve.Exit(time.Second); exited {
		t.Fatalf("serve did not give its task the grace:\n%s", serve.Output())
	}
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, exited := serve.Exit(5 * time.Second); !exited {
		t.Fatalf("serve still runs after a second SIGTERM")
	}
	e.Client.Cancel(ctx, id) //nolint:errcheck
}

// The catalog restarts while two serve processes run tasks: they keep running them, record
// their results once it is back, release the dependent and claim it; nothing is lost or run
// twice, and `deckhand job wait`, started before the restart, exits 0 for the job that
// finished and 1 for the one that failed.
func TestCatalogRestartMidRun(t *testing.T) {
	e := testenv.NewRestartable(t, pgcluster.Options{})
	db := e.AddNode("n1", 8)
	e.Exec(db, `CREATE TABLE marks (n int)`)
	// Leases outlast the restart: a worker the catalog could not hear from for a moment is
	// not dead.
	args := []string{"--lease", "10s", "--maintenance-interval", "100ms", "--concurrency", "4"}
	e.Serve(args...)
	e.Serve(args...)
	var tasks []spec.Task
	var names []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("t%d", i)
		names = append(names, name)
		tasks = append(tasks, spec.Task{Name: name, Node: "n1", SQL: fmt.Sprintf(`SELECT pg_sleep(4); INSERT INTO marks VALUES (%d)`, i)})
	}
	tasks = append(tasks, spec.Task{Name: "after", Node: "n1", DependsOn: names, SQL: `INSERT INTO marks VALUES (100)`})
	ok := submit(t, e, &spec.Job{Tasks: tasks})
	bad := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "fails", Node: "n1", MaxAttempts: 1, SQL: `SELECT pg_sleep(4); SELECT 1/0`}}})
	// The waits are told apart in pg_stat_activity by their application_name.
	waitOK := e.Start("--catalog", e.DSN+" application_name=waiter", "job", "wait", fmt.Sprint(ok))
	waitBad := e.Start("--catalog", e.DSN+" application_name=waiter", "job", "wait", fmt.Sprint(bad))
	waitSleeping(t, e, db, 7)
	waitersListen := func(what string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() bool {
			var listening int
			err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'waiter' AND query LIKE 'LISTEN %'`).Scan(&listening)
			return err == nil && listening == 2
		}, what)
	}
	waitersListen("both waits listen")

	restarted := time.Now()
	if err := e.CatalogCluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the catalog was down for %s", time.Since(restarted).Round(time.Millisecond))
	waitersListen("both waits listen again after the restart")

	if job := e.Wait(ok, time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, want finished", job.State)
	}
	d := detail(t, e, ok)
	if len(d.Attempts) != len(tasks) {
		t.Errorf("%d attempts for %d tasks, want one each: %+v", len(d.Attempts), len(tasks), d.Attempts)
	}
	for _, a := range d.Attempts {
		if a.Outcome != deckhandtype.OutcomeDone {
			t.Errorf("attempt of %s %s: %s", a.TaskName, a.Outcome, deref(a.Message))
		}
		if a.TaskName != "after" && (!a.StartedAt.Before(restarted) || a.FinishedAt == nil || !a.FinishedAt.After(restarted)) {
			t.Errorf("attempt of %s ran from %s to %v: want it started before the restart (%s) and recorded after",
				a.TaskName, a.StartedAt, a.FinishedAt, restarted)
		}
	}
	var marks string
	err := e.Pool(db).QueryRow(ctx, `SELECT string_agg(n::text, ',' ORDER BY n) FROM marks`).Scan(&marks)
	if err != nil || marks != "1,2,3,4,5,6,100" {
		t.Errorf("marks = %q (%v), want each task's once", marks, err)
	}
	for _, w := range []struct {
		p    *testenv.Process
		id   int64
		code int
	}{{waitOK, ok, 0}, {waitBad, bad, 1}} {
		code, exited := w.p.Exit(30 * time.Second)
		if !exited || code != w.code {
			t.Errorf("deckhand job wait %d: exited %v with %d, want %d\n%s", w.id, exited, code, w.code, w.p.Output())
		}
	}
}

// A catalog that stops answering without closing its connections (a network partition) does
// not hold a stopping worker: every call on the way out has a deadline, and the attempt whose
// result could not be recorded is returned as ErrNotRecorded.
func TestShutdownIsBoundedWhenTheCatalogStalls(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	proxy := pgtest.ProxyTo(t, e.Cluster)
	cfg := engine.Config{ShutdownGrace: 500 * time.Millisecond, ShutdownRecordTimeout: time.Second, CatalogTimeout: time.Second}
	w, stop := proxiedWorker(t, proxy, e.DB, cfg)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", SQL: "SELECT pg_sleep(600)"}}})
	first := runningAttempt(t, e, id)
	waitSleeping(t, e, db, 1)

	proxy.Stall(true)
	defer proxy.Stall(false)
	began := time.Now()
	err := stop(30 * time.Second)
	took := time.Since(began)
	t.Logf("Run returned %s after its context ended: %v", took.Round(time.Millisecond), err)
	// Grace, record timeout, at most one CatalogTimeout for a claim in flight, the close steps.
	if limit := 10 * time.Second; took > limit {
		t.Errorf("stopping took %s, want under %s", took, limit)
	}
	if !errors.Is(err, engine.ErrNotRecorded) || !strings.Contains(err.Error(), fmt.Sprintf("task %d/token %d", first.TaskID, first.Token)) {
		t.Errorf("Run returned %v, want ErrNotRecorded naming task %d/token %d", err, first.TaskID, first.Token)
	}
	proxy.Stall(false)
	if d := detail(t, e, id); d.Tasks[0].State != deckhandtype.TaskRunning || d.Tasks[0].WorkerID == nil || *d.Tasks[0].WorkerID != w.ID() {
		t.Errorf("task %s: want it still running on worker %d, for the leader to rescue", d.Tasks[0].State, w.ID())
	}
	e.Client.Cancel(ctx, id) //nolint:errcheck
}

// claimStatement matches the statements of a claim, which read the nodes' capacities it set.
var claimStatement = regexp.MustCompile(`deckhand\.claim_caps`)

// A claim that committed but whose answer the worker never got (the catalog restarted under
// it) leaves a task running on the worker's behalf that the worker never started. The worker
// notices at its next claim and releases it, so it runs rather than waiting for ever behind
// a worker whose heartbeats keep its lease alive.
func TestLostClaimAnswerIsReleased(t *testing.T) {
	e := testenv.New(t)
	proxy := pgtest.ProxyTo(t, e.Cluster)
	w, _ := proxiedWorker(t, proxy, e.DB, engine.Config{})
	// Every claim of the worker fails while the rule is in place. The rule sees a statement
	// when a connection prepares it: the worker's connections, which have prepared the claim
	// already, are cut. It matches the claim's own statement (claimStatement), not the other
	// statements that skip locked rows (the leader's settling and retention, the cleaner).
	removeRule := proxy.AddRule(pgtest.Rule{Name: "claim", Match: claimStatement, Action: pgtest.ActionError, Code: "08006"})
	proxy.DropAll()
	id := submit(t, e, noopJob)
	testenv.Eventually(t, 10*time.Second, func() bool { return proxy.Hits("claim") > 0 }, "a claim of the worker fails")
	// The claim whose answer was lost: committed for the worker, unknown to it.
	lost, err := e.Client.Catalog().Claim(ctx, w.ID(), 1)
	if err != nil || len(lost) != 1 || lost[0].JobID != id {
		t.Fatalf("claiming for the worker: %+v, %v", lost, err)
	}
	removeRule()
	if job := e.Wait(id, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	d := detail(t, e, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Token != lost[0].Token || d.Attempts[0].Outcome != deckhandtype.OutcomeReleased ||
		!strings.Contains(deref(d.Attempts[0].Message), "never started") || d.Attempts[1].Outcome != deckhandtype.OutcomeDone {
		t.Fatalf("attempts = %+v, want the lost claim released, then one done", d.Attempts)
	}
}

// A worker that stops with a claim's answer lost hands that claim's tasks back uncharged,
// rather than leaving them for the leader to rescue as lost.
func TestLostClaimAnswerIsReleasedOnShutdown(t *testing.T) {
	e := testenv.New(t)
	proxy := pgtest.ProxyTo(t, e.Cluster)
	w, stop := proxiedWorker(t, proxy, e.DB, engine.Config{})
	proxy.AddRule(pgtest.Rule{Name: "claim", Match: claimStatement, Action: pgtest.ActionError, Code: "08006"})
	proxy.DropAll()
	id := submit(t, e, noopJob)
	testenv.Eventually(t, 10*time.Second, func() bool { return proxy.Hits("claim") > 0 }, "a claim of the worker fails")
	lost, err := e.Client.Catalog().Claim(ctx, w.ID(), 1)
	if err != nil || len(lost) != 1 {
		t.Fatalf("claiming for the worker: %+v, %v", lost, err)
	}
	if err := stop(30 * time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	d := detail(t, e, id)
	if d.Tasks[0].State != deckhandtype.TaskRunnable || d.Tasks[0].Attempts != 0 || len(d.Attempts) != 1 ||
		d.Attempts[0].Outcome != deckhandtype.OutcomeReleased {
		t.Fatalf("task %s with %d attempts charged, attempts %+v: want it runnable again, released uncharged", d.Tasks[0].State, d.Tasks[0].Attempts, d.Attempts)
	}
}

// runningAttempt waits for the job's first attempt to run and returns it.
func runningAttempt(t *testing.T, e *testenv.Env, id int64) deckhandtype.Attempt {
	t.Helper()
	var running deckhandtype.Attempt
	testenv.Eventually(t, 20*time.Second, func() bool {
		for _, a := range detail(t, e, id).Attempts {
			if a.Outcome == deckhandtype.OutcomeRunning {
				running = a
				return true
			}
		}
		return false
	}, "the task runs")
	return running
}

// waitSleeping waits until n task attempts sleep in pg_sleep on the node's database db. The
// catalog says a task runs as soon as its claim commits, a moment before the worker has the
// claim's answer; a backend running the task's SQL proves the worker has it.
func waitSleeping(t *testing.T, e *testenv.Env, db string, n int) {
	t.Helper()
	node := e.Pool(db)
	testenv.Eventually(t, 20*time.Second, func() bool {
		var sleeping int
		err := node.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name LIKE 'deckhand task %' AND wait_event = 'PgSleep'`).Scan(&sleeping)
		if err != nil {
			t.Fatal(err)
		}
		return sleeping == n
	}, fmt.Sprintf("%d tasks run on the node", n))
}

// proxiedWorker runs a worker whose catalog connections go through proxy to database db, so
// that the test can stall or break them. stop cancels its context and returns what Run
// returned, failing the test if Run has not returned within d; it is also called at cleanup.
func proxiedWorker(t *testing.T, proxy *pgtest.Proxy, db string, cfg engine.Config) (w *engine.Worker, stop func(d time.Duration) error) {
	t.Helper()
	cat, err := catalog.Open(ctx, proxy.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoCleaner = true
	cfg.Logger = testenv.Quiet()
	cfg.LeaseTTL = max(cfg.LeaseTTL, 10*time.Second)
	cfg.PollInterval = max(cfg.PollInterval, 100*time.Millisecond)
	w = engine.NewWorker(cat, cfg)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	var once sync.Once
	var runErr error
	stop = func(d time.Duration) error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(d):
				t.Fatalf("the worker's Run still had not returned %s after its context ended", d)
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop(30 * time.Second); cat.Close() })
	testenv.Eventually(t, 10*time.Second, func() bool { return w.ID() != 0 }, "the worker registers")
	return w, stop
}
