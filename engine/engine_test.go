package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

func submit(t *testing.T, e *testenv.Env, j *spec.Job) int64 {
	t.Helper()
	id, err := e.Client.Submit(ctx, j)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return id
}

func ptr[T any](v T) *T { return &v }

func TestDiamondRunsInDependencyOrder(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE log (task text, at timestamptz DEFAULT clock_timestamp())`)
	e.Worker(engine.Config{Concurrency: 8})
	// Each task runs for a while after it logs its start, so that two running in parallel
	// overlap whatever the machine's load makes of their start-up.
	const runs = 500 * time.Millisecond
	step := func(name string) string {
		return `INSERT INTO log (task) VALUES ('` + name + `'); SELECT pg_sleep(` + strconv.FormatFloat(runs.Seconds(), 'f', -1, 64) + `)`
	}
	id := submit(t, e, &spec.Job{Description: "diamond", Tasks: []spec.Task{
		{Name: "d", Node: "n1", SQL: step("d"), DependsOn: []string{"b", "c"}},
		{Name: "b", Node: "n1", SQL: step("b"), DependsOn: []string{"a"}},
		{Name: "a", Node: "n1", SQL: step("a")},
		{Name: "c", Node: "n1", SQL: step("c"), DependsOn: []string{"a"}},
	}})
	job := e.Wait(id, 30*time.Second)
	if job.State != deckhandtype.JobFinished || job.TasksDone != 4 {
		t.Fatalf("job = %+v, want finished with 4 done; attempts: %s", job, explain(detail(t, e, id)))
	}
	at := map[string]time.Time{}
	rows, err := e.Pool(db).Query(ctx, `SELECT task, at FROM log`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var ts time.Time
		if err := rows.Scan(&name, &ts); err != nil {
			t.Fatal(err)
		}
		at[name] = ts
	}
	if len(at) != 4 {
		t.Fatalf("log has %d tasks, want 4: %v", len(at), at)
	}
	for _, edge := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}} {
		if !at[edge[0]].Before(at[edge[1]]) {
			t.Errorf("%s started at %s, not before its dependent %s at %s", edge[0], at[edge[0]], edge[1], at[edge[1]])
		}
	}
	// b and c are independent: both must have started before either finished (they overlap).
	if d := at["b"].Sub(at["c"]).Abs(); d >= runs {
		t.Errorf("b and c started %s apart; they should run in parallel", d)
	}
}

// Independent tasks run in parallel up to each node's max_tasks and never above it.
func TestNodeLimitIsNeverExceeded(t *testing.T) {
	e := testenv.New(t)
	db1 := e.AddNode("small", 2)
	db2 := e.AddNode("large", 3)
	for _, db := range []string{db1, db2} {
		e.Exec(db, `CREATE TABLE span (started timestamptz, ended timestamptz)`)
	}
	// Two workers compete for the same nodes.
	e.Worker(engine.Config{Concurrency: 10})
	e.Worker(engine.Config{Concurrency: 10})
	var tasks []spec.Task
	for i := range 8 {
		for _, node := range []string{"small", "large"} {
			tasks = append(tasks, spec.Task{
				Name: node + string(rune('a'+i)), Node: node,
				SQL: `DO $$ DECLARE s timestamptz := clock_timestamp(); BEGIN PERFORM pg_sleep(0.15);
				      INSERT INTO span VALUES (s, clock_timestamp()); END $$`,
			})
		}
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	if job := e.Wait(id, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	for db, limit := range map[string]int{db1: 2, db2: 3} {
		var peak int
		err := e.Pool(db).QueryRow(ctx, `
			SELECT max(n) FROM (SELECT (SELECT count(*) FROM span o WHERE o.started <= s.started AND o.ended > s.started) AS n
			FROM span s) x`).Scan(&peak)
		if err != nil {
			t.Fatal(err)
		}
		if peak != limit {
			t.Errorf("node with max_tasks %d peaked at %d concurrent tasks, want exactly %d", limit, peak, limit)
		}
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A retryable error is retried after the backoff, measured on an injected clock: the task is
// not claimable until the clock passes not_before, and then it succeeds.
func TestRetryableErrorRetriesAfterBackoff(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE SEQUENCE tries`)
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	backoff := deckhandtype.Backoff{Base: 10 * time.Second, Max: time.Minute, Jitter: 0.5}
	// The lease outlasts the clock's jumps, so the leader never takes the worker for dead.
	w, _ := e.Worker(engine.Config{Clock: clock, Rand: func() float64 { return 0.75 }, Backoff: backoff, LeaseTTL: time.Hour})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{
		Name: "flaky", Node: "n1", MaxAttempts: 3,
		SQL: `DO $$ BEGIN IF nextval('tries') < 2 THEN
		        RAISE EXCEPTION 'transient trouble' USING ERRCODE = '40001'; END IF; END $$`,
	}}})
	var task deckhandtype.Task
	testenv.Eventually(t, 10*time.Second, func() bool {
		task = detail(t, e, id).Tasks[0]
		return task.State == deckhandtype.TaskRunnable && task.Runs == 1
	}, "the first attempt fails")
	// attempt 1 with jitter 0.5 and r=0.75: 10s * (1 - 0.5 + 2*0.5*0.75) = 12.5s
	wantNotBefore := clock.Now().Add(12500 * time.Millisecond)
	if task.NotBefore == nil || !task.NotBefore.Equal(wantNotBefore) {
		t.Fatalf("not_before = %v, want %s; task %+v; attempts: %s", task.NotBefore, wantNotBefore, task, explain(detail(t, e, id)))
	}
	if task.LastError == nil || task.LastError.SQLState != "40001" {
		t.Fatalf("last_error = %+v, want SQLSTATE 40001", task.LastError)
	}
	clock.Advance(12 * time.Second)
	w.Nudge()
	time.Sleep(300 * time.Millisecond) // give a wrongly eager worker the chance to claim it
	if d := detail(t, e, id); d.Tasks[0].State != deckhandtype.TaskRunnable || d.Tasks[0].Runs != 1 {
		t.Fatalf("task ran before its backoff elapsed: %+v", d.Tasks[0])
	}
	clock.Advance(time.Second)
	w.Nudge()
	job := e.Wait(id, 10*time.Second)
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	d := detail(t, e, id)
	var outcomes []string
	for _, a := range d.Attempts {
		outcomes = append(outcomes, string(a.Outcome))
	}
	if strings.Join(outcomes, ",") != "retry,done" {
		t.Fatalf("attempt outcomes = %v, want [retry done]", outcomes)
	}
	if msg := d.Attempts[0].Message; msg == nil || *msg != "transient trouble" {
		t.Errorf("first attempt message = %v", msg)
	}
}

func TestPermanentErrorUnschedulesDependents(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	e.Worker(engine.Config{})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "bad", Node: "n1", SQL: "SELEC 1", MaxAttempts: 5},
		{Name: "child", Node: "n1", SQL: "SELECT 1", DependsOn: []string{"bad"}},
		{Name: "grandchild", Node: "n1", SQL: "SELECT 1", DependsOn: []string{"child"}},
		{Name: "independent", Node: "n1", SQL: "SELECT 1"},
	}})
	job := e.Wait(id, 30*time.Second)
	if job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s, want failed", job.State)
	}
	d := detail(t, e, id)
	want := map[string]deckhandtype.TaskState{"bad": "failed", "child": "unscheduled", "grandchild": "unscheduled", "independent": "done"}
	for _, task := range d.Tasks {
		if task.State != want[task.Name] {
			t.Errorf("task %s is %s, want %s", task.Name, task.State, want[task.Name])
		}
		if task.Name == "bad" {
			if task.Attempts != 1 {
				t.Errorf("a permanent error was retried: %d attempts", task.Attempts)
			}
			if task.LastError == nil || task.LastError.SQLState != "42601" || !strings.Contains(task.LastError.Message, "SELEC") {
				t.Errorf("last_error = %+v, want the syntax error kept", task.LastError)
			}
		}
	}
}

func TestCancelRunningTask(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Worker(engine.Config{})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "long", Node: "n1", SQL: "SELECT pg_sleep(600)"},
		{Name: "after", Node: "n1", SQL: "SELECT 1", DependsOn: []string{"long"}},
	}})
	node := e.Pool(db)
	backends := func() int {
		var n int
		if err := node.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(600)%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return backends() == 1 }, "the long task runs on the node")
	began := time.Now()
	if _, err := e.Client.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	job := e.Wait(id, 10*time.Second)
	t.Logf("cancel to job cancelled (running backend stopped): %s", time.Since(began))
	if job.State != deckhandtype.JobCancelled || job.TasksCancelled != 2 {
		t.Fatalf("job = %+v, want cancelled with 2 cancelled tasks", job)
	}
	if n := backends(); n != 0 {
		t.Errorf("%d backends still run the cancelled statement", n)
	}
	if _, err := e.Client.Cancel(ctx, id); !errors.Is(err, catalog.ErrJobTerminal) {
		t.Errorf("cancelling an ended job: err = %v, want ErrJobTerminal", err)
	}
	// Retry brings the cancelled tasks back.
	if _, err := e.Client.Retry(ctx, id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return backends() == 1 }, "the retried task runs again")
	if _, err := e.Client.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.Wait(id, 10*time.Second)
}

// A worker stopped gracefully releases a task that outlives the grace period without
// charging it an attempt.
func TestShutdownReleasesWithoutChargingAnAttempt(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	_, stop := e.Worker(engine.Config{ShutdownGrace: 200 * time.Millisecond})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", SQL: "SELECT pg_sleep(600)", MaxAttempts: 1}}})
	testenv.Eventually(t, 10*time.Second, func() bool {
		d := detail(t, e, id)
		return d.Tasks[0].State == deckhandtype.TaskRunning
	}, "the task runs")
	stop()
	d := detail(t, e, id)
	task := d.Tasks[0]
	if task.State != deckhandtype.TaskRunnable || task.Attempts != 0 || task.Runs != 1 {
		t.Fatalf("after shutdown task = %s attempts=%d runs=%d, want runnable, 0 charged, 1 run", task.State, task.Attempts, task.Runs)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Outcome != deckhandtype.OutcomeReleased {
		t.Fatalf("attempts = %+v, want one released", d.Attempts)
	}
	// max_attempts is 1: the release did not use it up, so a new worker still runs the task.
	e.Worker(engine.Config{})
	testenv.Eventually(t, 10*time.Second, func() bool {
		d := detail(t, e, id)
		return d.Tasks[0].State == deckhandtype.TaskRunning
	}, "a new worker runs the released task")
	e.Client.Cancel(ctx, id) //nolint:errcheck
}

// kill -9 of a worker during a long task: after its lease expires the leader terminates the
// orphaned backend and another worker re-runs the task; both attempts are recorded.
func TestKilledWorkerTaskIsRerun(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE runs (app text)`)
	victim := e.Serve("--lease", "1s", "--maintenance-interval", "100ms")
	// Refuses to run if another attempt holds the lock: proves no two attempts overlap.
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", MaxAttempts: 3, SQL: `
		DO $$ BEGIN
			IF NOT pg_try_advisory_lock(4242) THEN RAISE EXCEPTION 'another attempt is running' USING ERRCODE = '23000'; END IF;
		END $$;
		INSERT INTO runs VALUES (current_setting('application_name'));
		SELECT pg_sleep(2);`}}})
	testenv.Eventually(t, 20*time.Second, func() bool {
		d := detail(t, e, id)
		return d.Tasks[0].State == deckhandtype.TaskRunning
	}, "the first worker runs the task")
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Cmd.Wait()
	e.Worker(engine.Config{LeaseTTL: time.Second})
	job := e.Wait(id, 30*time.Second)
	if job.State != deckhandtype.JobFinished {
		d := detail(t, e, id)
		t.Fatalf("job %s: %+v", job.State, d.Attempts)
	}
	d := detail(t, e, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Outcome != deckhandtype.OutcomeLost || d.Attempts[1].Outcome != deckhandtype.OutcomeDone {
		t.Fatalf("attempts = %+v, want lost then done", d.Attempts)
	}
	if d.Attempts[0].WorkerID == nil || d.Attempts[1].WorkerID == nil || *d.Attempts[0].WorkerID == *d.Attempts[1].WorkerID {
		t.Errorf("both attempts ran on the same worker")
	}
	// The killed attempt's transaction died with its terminated backend; only the re-run committed.
	var runs int
	e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&runs) //nolint:errcheck
	if runs != 1 {
		t.Errorf("%d attempts committed their work, want 1", runs)
	}
}

// The leader is killed: another worker takes over, rescues the leader's tasks, and every task
// completes exactly once.
func TestLeaderFailover(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 8)
	e.Exec(db, `CREATE TABLE done (task text PRIMARY KEY)`)
	leader := e.Serve("--lease", "1s", "--maintenance-interval", "100ms", "--concurrency", "4")
	testenv.Eventually(t, 20*time.Second, func() bool {
		id, _ := e.Client.Leader(ctx)
		return id != 0
	}, "the first worker is elected")
	first, _ := e.Client.Leader(ctx)
	var tasks []spec.Task
	for i := range 12 {
		name := "t" + string(rune('a'+i))
		tasks = append(tasks, spec.Task{Name: name, Node: "n1", MaxAttempts: 3, SQL: `
			DO $$ BEGIN
				IF NOT pg_try_advisory_xact_lock(hashtext('` + name + `')) THEN
					RAISE EXCEPTION 'ran twice at once' USING ERRCODE = '23000';
				END IF;
			END $$;
			SELECT pg_sleep(0.5); INSERT INTO done VALUES ('` + name + `')`})
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	testenv.Eventually(t, 20*time.Second, func() bool {
		d, err := e.Client.Job(ctx, id)
		if err != nil {
			return false
		}
		for _, task := range d.Tasks {
			if task.State == deckhandtype.TaskRunning {
				return true
			}
		}
		return false
	}, "the leader runs tasks")
	w, _ := e.Worker(engine.Config{LeaseTTL: time.Second, Concurrency: 4})
	if err := leader.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, w.Leading, "the surviving worker becomes leader")
	if now, _ := e.Client.Leader(ctx); now == first || now != w.ID() {
		t.Errorf("leader is %d, want the survivor %d (was %d)", now, w.ID(), first)
	}
	job := e.Wait(id, 60*time.Second)
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	d := detail(t, e, id)
	doneAttempts := map[string]int{}
	for _, a := range d.Attempts {
		if a.Outcome == deckhandtype.OutcomeDone {
			doneAttempts[a.TaskName]++
		}
		if a.Outcome == deckhandtype.OutcomeFailed || a.Outcome == deckhandtype.OutcomeRetry {
			t.Errorf("attempt of %s %s: %v", a.TaskName, a.Outcome, deref(a.Message))
		}
	}
	for _, task := range tasks {
		if doneAttempts[task.Name] != 1 {
			t.Errorf("task %s completed %d times", task.Name, doneAttempts[task.Name])
		}
	}
	var rows int
	e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM done`).Scan(&rows) //nolint:errcheck
	if rows != len(tasks) {
		t.Errorf("%d tasks recorded their work, want %d", rows, len(tasks))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func detail(t *testing.T, e *testenv.Env, id int64) *engine.JobDetail {
	t.Helper()
	d, err := e.Client.Job(ctx, id)
	if err != nil {
		t.Fatalf("read job %d: %v", id, err)
	}
	return d
}

// explain lists a job's attempts for failure messages.
func explain(d *engine.JobDetail) string {
	var b strings.Builder
	for _, a := range d.Attempts {
		b.WriteString("\n  " + a.TaskName + " #" + strconv.Itoa(a.Attempt) + " " + string(a.Outcome) + " " + deref(a.SQLState) + " " + deref(a.Message))
	}
	return b.String()
}

// The leader deletes jobs that ended longer ago than the retention, keeps the rest, and
// records each node's role. The clock is moved past the retention instead of waiting.
func TestLeaderRetentionAndNodeProbe(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	old := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "t", Kind: spec.KindNoop}}})
	w, stop := e.Worker(engine.Config{})
	e.Wait(old, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool {
		nodes, err := e.Client.Nodes(ctx)
		return err == nil && nodes[0].Role == "primary" && nodes[0].ReplayLSN != nil
	}, "the leader records the node's role and WAL position")
	if !w.Leading() {
		t.Fatal("the only worker does not lead")
	}
	stop()
	running := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", SQL: "SELECT pg_sleep(600)"}}})

	// Eight days later (retention is seven by default) a new leader cleans up: the old finished
	// job goes; the job still running stays.
	clock := &fakeClock{t: time.Now().Add(8 * 24 * time.Hour)}
	e.Worker(engine.Config{Clock: clock, NoLeader: false, Concurrency: 1})
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := e.Client.JobRow(ctx, old)
		return errors.Is(err, catalog.ErrNotFound)
	}, "the finished job is deleted after the retention")
	if _, err := e.Client.JobRow(ctx, running); err != nil {
		t.Fatalf("a job that had not ended was deleted: %v", err)
	}
	if _, err := e.Client.Cancel(ctx, running); err != nil {
		t.Fatal(err)
	}
}
