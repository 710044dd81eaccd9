package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// completionGate holds the worker's next batch of results (the statement that records them and
// claims, tasks ahead included) before it is sent, while the gate is shut.
type completionGate struct {
	mu      sync.Mutex
	shut    chan struct{} // nil: open
	arrived chan struct{} // receives once per batch held at the gate
}

func newCompletionGate() *completionGate {
	return &completionGate{arrived: make(chan struct{}, 16)}
}

func (g *completionGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = make(chan struct{})
}

func (g *completionGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *completionGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (g *completionGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (g *completionGate) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	completes := false
	for _, q := range data.Batch.QueuedQueries {
		if strings.Contains(q.SQL, "h(id, token)") {
			completes = true
		}
	}
	if !completes {
		return ctx
	}
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		g.arrived <- struct{}{}
		<-shut
	}
	return ctx
}
func (g *completionGate) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (g *completionGate) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// gatedWorker runs a worker whose catalog connections pass through gate.
func gatedWorker(t *testing.T, e *testenv.Env, gate *completionGate, cfg engine.Config) (*engine.Worker, func()) {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Tracer = gate
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return e.WorkerOn(catalog.New(pool), cfg)
}

// waitersOnNode counts the sessions on the node waiting for an advisory lock.
func waitersOnNode(t *testing.T, e *testenv.Env, db string) int {
	t.Helper()
	var n int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A worker claims tasks ahead for the slots it holds on a node at the moment it asks; if all
// of those holders end while the claim is on its way, nothing of this worker is left on the
// node to hand a slot to the tasks claimed ahead. They must still run (invariant: no task
// stays waiting for a slot that no task of its worker will ever hand over).
func TestTasksClaimedAheadRunWhenTheirHoldersEndDuringTheClaim(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n", 2)
	e.Exec(db, `CREATE TABLE span (task int, started timestamptz, ended timestamptz)`)
	gate := newCompletionGate()
	gatedWorker(t, e, gate, engine.Config{Concurrency: 10})

	// The test holds advisory lock i on the node; task i ends once it lets go of it.
	locker, err := e.Pool(db).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Release()
	const n = 6
	for i := 1; i <= n; i++ {
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_lock($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	let := func(i int) {
		t.Helper()
		if _, err := locker.Exec(ctx, `SELECT pg_advisory_unlock($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	var tasks []spec.Task
	for i := 1; i <= n; i++ {
		tasks = append(tasks, spec.Task{
			Name: fmt.Sprintf("t%d", i), Node: "n",
			SQL: fmt.Sprintf(`DO $$ DECLARE s timestamptz := clock_timestamp(); BEGIN PERFORM pg_advisory_xact_lock_shared(%d);
			      INSERT INTO span VALUES (%d, s, clock_timestamp()); END $$`, i, i),
		})
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	queued := func() []string {
		rows, _ := e.Pool(e.DB).Query(ctx, `SELECT name FROM deckhand.task WHERE job_id = $1 AND queued ORDER BY id`, id)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}

	// t1 and t2 take the node's two slots.
	testenv.Eventually(t, 10*time.Second, func() bool { return waitersOnNode(t, e, db) == 2 }, "t1 and t2 wait on the node")
	// t1 ends: its result's claim takes t3 into its slot and t4 ahead (t2 still holds one).
	let(1)
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Join(queued(), ",") == "t4" }, "t4 claimed ahead")
	testenv.Eventually(t, 10*time.Second, func() bool { return waitersOnNode(t, e, db) == 2 }, "t2 and t3 wait on the node")
	// t3 ends and hands its slot to t4, which starts. The next claim asks for two ahead (the
	// worker holds both slots); it is held before it is sent.
	gate.close()
	let(3)
	select {
	case <-gate.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the result of t3 never went to the catalog")
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return waitersOnNode(t, e, db) == 2 }, "t2 and t4 wait on the node")
	// Meanwhile both holders end.
	let(2)
	let(4)
	testenv.Eventually(t, 10*time.Second, func() bool { return waitersOnNode(t, e, db) == 0 }, "t2 and t4 end")
	time.Sleep(100 * time.Millisecond)
	let(5)
	let(6)
	gate.open()

	ctxWait, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	job, err := e.Client.Wait(ctxWait, id, nil)
	if err != nil {
		var states []string
		rows, _ := e.Pool(e.DB).Query(ctx, `SELECT name || ':' || state || CASE WHEN queued THEN '(queued)' ELSE '' END
			FROM deckhand.task WHERE job_id = $1 ORDER BY id`, id)
		states, _ = pgx.CollectRows(rows, pgx.RowTo[string])
		t.Fatalf("job did not end: %v; tasks: %s", err, strings.Join(states, " "))
	}
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
}

// Without any help from the test: small jobs of short tasks on a busy node, one after the
// other. Each job's last tasks are often claimed ahead; none may be left waiting.
func TestShortJobsOnABusyNodeAllEnd(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n", 2)
	e.Exec(db, `CREATE TABLE span (started timestamptz, ended timestamptz)`)
	e.Worker(engine.Config{Concurrency: 10})
	deadline := time.Now().Add(6 * time.Second)
	for j := 0; time.Now().Before(deadline); j++ {
		var tasks []spec.Task
		for i := range 8 {
			tasks = append(tasks, spec.Task{
				Name: fmt.Sprintf("t%d", i), Node: "n",
				SQL: fmt.Sprintf(`DO $$ DECLARE s timestamptz := clock_timestamp(); BEGIN PERFORM pg_sleep(%g);
				      INSERT INTO span VALUES (s, clock_timestamp()); END $$`, 0.001*float64(i%4)),
			})
		}
		id := submit(t, e, &spec.Job{Tasks: tasks})
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		job, err := e.Client.Wait(wctx, id, nil)
		cancel()
		if err != nil {
			rows, _ := e.Pool(e.DB).Query(ctx, `SELECT name || ':' || state || CASE WHEN queued THEN '(queued)' ELSE '' END
				FROM deckhand.task WHERE job_id = $1 ORDER BY id`, id)
			states, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			t.Fatalf("job %d (the %dth) did not end: %v; tasks: %s", id, j+1, err, strings.Join(states, " "))
		}
		if job.State != deckhandtype.JobFinished {
			t.Fatalf("job %s", job.State)
		}
	}
}

// stressTask is SQL for a task of the stress test on a node of max_tasks slots: it takes one
// of the node's slot locks (transaction advisory locks, held until its node transaction ends,
// however it ends) and counts in the sequence overlimit when all are held, sleeps, writes its
// effect and, when flaky, fails its first run with a retryable error after that (its sequence
// flaky_NAME counts its runs).
func stressTask(name string, slots int, sleep float64, flaky bool) string {
	var try []string
	for k := 1; k <= slots; k++ {
		try = append(try, fmt.Sprintf("pg_try_advisory_xact_lock(4242, %d)", k))
	}
	fail := ""
	if flaky {
		fail = fmt.Sprintf(`IF nextval('flaky_%s') = 1 THEN RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'flaky %s'; END IF;`, name, name)
	}
	return fmt.Sprintf(`DO $$ BEGIN
		IF NOT (%s) THEN PERFORM nextval('overlimit'); END IF;
		PERFORM pg_sleep(%g);
		INSERT INTO effect VALUES ('%s');
		%s
	END $$`, strings.Join(try, " OR "), sleep, name, fail)
}

// Several workers, fast and slow tasks, retries, a cancel, pauses (now and wait) and resumes,
// and a worker stopped mid-run: no node ever runs more than its max_tasks (counted on the node
// itself, by slot locks), every job ends as it should, every finished task's effect is there
// once, and nothing is left marked queued.
func TestClaimAheadUnderChurnKeepsTheInvariants(t *testing.T) {
	e := testenv.New(t)
	limits := map[string]int{"n1": 2, "n2": 3}
	dbs := map[string]string{}
	for node, max := range limits {
		dbs[node] = e.AddNode(node, max)
		e.Exec(dbs[node], `CREATE TABLE effect (name text); CREATE SEQUENCE overlimit`)
	}
	fastRetry := deckhandtype.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}
	metrics := engine.NewMetrics(nil) // shared by the workers
	cfg := engine.Config{Concurrency: 6, Backoff: fastRetry, ShutdownGrace: 300 * time.Millisecond, Metrics: metrics}
	_, stop1 := e.Worker(cfg)
	e.Worker(cfg)
	e.Worker(cfg)

	job := func(prefix string, n int) *spec.Job {
		var tasks []spec.Task
		for i := range n {
			node := "n1"
			if i%3 == 0 {
				node = "n2"
			}
			sleep := 0.002
			if i%7 == 0 {
				sleep = 0.05
			}
			name := fmt.Sprintf("%s%d", prefix, i)
			if i%5 == 0 {
				e.Exec(dbs[node], fmt.Sprintf(`CREATE SEQUENCE flaky_%s`, name))
			}
			tasks = append(tasks, spec.Task{Name: name, Node: node, MaxAttempts: 10,
				SQL: stressTask(name, limits[node], sleep, i%5 == 0)})
		}
		return &spec.Job{Tasks: tasks}
	}
	plain := submit(t, e, job("p", 150))
	cancelled := submit(t, e, job("c", 150))
	pausedNow := submit(t, e, job("q", 150))
	pausedWait := submit(t, e, job("w", 150))

	time.Sleep(300 * time.Millisecond)
	if _, err := e.Client.Pause(ctx, pausedNow, true); err != nil {
		t.Errorf("pause now: %v", err)
	}
	if _, err := e.Client.Pause(ctx, pausedWait, false); err != nil {
		t.Errorf("pause: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := e.Client.Cancel(ctx, cancelled); err != nil {
		t.Errorf("cancel: %v", err)
	}
	stop1()
	e.Worker(cfg)
	time.Sleep(300 * time.Millisecond)
	for _, id := range []int64{pausedNow, pausedWait} {
		testenv.Eventually(t, 10*time.Second, func() bool { return jobState(t, e, id) == deckhandtype.JobPaused }, "job paused")
		if _, err := e.Client.Resume(ctx, id); err != nil {
			t.Errorf("resume: %v", err)
		}
	}

	want := map[int64]deckhandtype.JobState{plain: deckhandtype.JobFinished, cancelled: deckhandtype.JobCancelled,
		pausedNow: deckhandtype.JobFinished, pausedWait: deckhandtype.JobFinished}
	for id, state := range want {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		j, err := e.Client.Wait(wctx, id, nil)
		cancel()
		if err != nil {
			rows, _ := e.Pool(e.DB).Query(ctx, `SELECT name || ':' || state || CASE WHEN queued THEN '(queued)' ELSE '' END
				FROM deckhand.task WHERE job_id = $1 AND state NOT IN ('done', 'cancelled') ORDER BY id`, id)
			states, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			t.Fatalf("job %d did not end: %v; tasks not done: %s", id, err, strings.Join(states, " "))
		}
		if j.State != state {
			t.Errorf("job %d %s, want %s", id, j.State, state)
		}
	}
	for node, db := range dbs {
		var over int64
		var called bool
		if err := e.Pool(db).QueryRow(ctx, `SELECT last_value, is_called FROM overlimit`).Scan(&over, &called); err != nil {
			t.Fatal(err)
		}
		if called {
			t.Errorf("node %s (max_tasks %d): %d tasks started with all its slots taken", node, limits[node], over)
		}
	}
	// Effects: each done task's exactly once (its node transaction committed once), none of a
	// task not done.
	rows, _ := e.Pool(e.DB).Query(ctx, `SELECT name, node, state, attempts FROM deckhand.task`)
	type row struct {
		Name, Node, State string
		Attempts          int
	}
	flaky := func(name string) bool { n, _ := strconv.Atoi(name[1:]); return n%5 == 0 }
	tasks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	effects := map[string]int{}
	for _, db := range dbs {
		rows, _ := e.Pool(db).Query(ctx, `SELECT name, count(*)::int FROM effect GROUP BY name`)
		type eff struct {
			Name string
			N    int
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[eff])
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			effects[g.Name] += g.N
		}
	}
	bad := 0
	for _, tk := range tasks {
		switch {
		case tk.State == "done" && effects[tk.Name] != 1:
			t.Errorf("task %s done with its effect %d times", tk.Name, effects[tk.Name])
			bad++
		case tk.State != "done" && effects[tk.Name] != 0:
			t.Errorf("task %s %s with its effect %d times", tk.Name, tk.State, effects[tk.Name])
			bad++
		case tk.State == "done" && (tk.Attempts > 2 || tk.Attempts == 2 && !flaky(tk.Name)):
			// A flaky task fails its first run; releases (pause now, shutdown) are not
			// charged: a done task charged more was charged for an attempt that did not run.
			t.Errorf("task %s charged %d attempts", tk.Name, tk.Attempts)
			bad++
		}
		if bad > 10 {
			break
		}
	}
	var queued int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM deckhand.task WHERE queued`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 0 {
		t.Errorf("%d tasks still marked queued", queued)
	}
	ahead, handed := counted(t, metrics.ClaimedAhead), counted(t, metrics.HandedOver)
	if ahead == 0 || handed == 0 {
		t.Errorf("%v tasks claimed ahead, %v slots handed over: the test did not exercise claiming ahead", ahead, handed)
	}
	t.Logf("%v tasks claimed ahead, %v slots handed over", ahead, handed)
}

// Lowering a node's max_tasks (deckhand node add of a registered node) bounds the tasks that
// start there from then on: once those that ran at the change have ended, no more than the new
// max_tasks run at once, however busy the node is.
func TestLoweredMaxTasksHoldsOnABusyNode(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n", 3)
	e.Exec(db, `CREATE TABLE span (started timestamptz, ended timestamptz)`)
	metrics := engine.NewMetrics(nil)
	e.Worker(engine.Config{Concurrency: 10, Metrics: metrics})
	id := submit(t, e, &spec.Job{Tasks: spanTasks("n", 600, 0.01)})
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM span`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= 100
	}, "100 tasks ran")
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "n", DSN: e.Cluster.DSN(db, "postgres"), MaxTasks: 1}); err != nil {
		t.Fatal(err)
	}
	var lowered time.Time
	if err := e.Pool(db).QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&lowered); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	// Tasks that started half a second after the change, long after those running then ended.
	var peak, rows int
	if err := e.Pool(db).QueryRow(ctx, `
		SELECT coalesce(max(n), 0), count(*) FROM (SELECT (SELECT count(*) FROM span o WHERE o.started <= s.started AND o.ended > s.started) AS n
		FROM span s WHERE s.started > $1::timestamptz + interval '500 ms') x`, lowered).Scan(&peak, &rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tasks started after the change settled; %v claimed ahead in all", rows, counted(t, metrics.ClaimedAhead))
	if rows == 0 {
		t.Fatal("no task started after the change: nothing was checked")
	}
	if peak > 1 {
		t.Errorf("after max_tasks went down to 1, %d tasks ran at once on the node", peak)
	}
}
