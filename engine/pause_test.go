package engine_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// jobState reads a job's state.
func jobState(t *testing.T, e *testenv.Env, id int64) deckhandtype.JobState {
	t.Helper()
	return detail(t, e, id).State
}

// task reads a job's task by name.
func task(t *testing.T, e *testenv.Env, id int64, name string) deckhandtype.Task {
	t.Helper()
	for _, tk := range detail(t, e, id).Tasks {
		if tk.Name == name {
			return tk
		}
	}
	t.Fatalf("job %d has no task %s", id, name)
	return deckhandtype.Task{}
}

// waitState waits until the job is in state want.
func waitState(t *testing.T, e *testenv.Env, id int64, want deckhandtype.JobState) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() bool { return jobState(t, e, id) == want }, "job is "+string(want))
}

// sleepsFirstTime is SQL that sleeps for a long time the first time it runs and returns at
// once afterwards: the sequence counts runs whatever becomes of their transactions.
const sleepsFirstTime = `SELECT pg_sleep(CASE WHEN nextval('runs') = 1 THEN 30 ELSE 0 END)`

// A pause lets the running task finish; its dependent, released meanwhile, waits paused
// until the job is resumed.
func TestPauseLetsRunningTasksFinish(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE log (task text)`)
	e.Worker(engine.Config{Concurrency: 4})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: `SELECT pg_sleep(0.5); INSERT INTO log VALUES ('a')`},
		{Name: "b", Node: "n1", SQL: `INSERT INTO log VALUES ('b')`, DependsOn: []string{"a"}},
	}})
	testenv.Eventually(t, 10*time.Second, func() bool { return task(t, e, id, "a").State == deckhandtype.TaskRunning }, "a runs")
	state, err := e.Client.Pause(ctx, id, false)
	if err != nil || state != deckhandtype.JobPausing {
		t.Fatalf("pause: %s, %v; want pausing", state, err)
	}
	waitState(t, e, id, deckhandtype.JobPaused)
	if a, b := task(t, e, id, "a"), task(t, e, id, "b"); a.State != deckhandtype.TaskDone || b.State != deckhandtype.TaskPaused {
		t.Fatalf("paused job: a %s, b %s; want done and paused", a.State, b.State)
	}
	time.Sleep(300 * time.Millisecond) // a worker that claimed b would have run it by now
	var logged int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM log WHERE task = 'b'`).Scan(&logged); err != nil || logged != 0 {
		t.Fatalf("b ran %d times while its job was paused (%v)", logged, err)
	}
	if _, err := e.Client.Pause(ctx, id, false); err != nil {
		t.Errorf("pausing a paused job again: %v", err)
	}
	if state, err := e.Client.Resume(ctx, id); err != nil || state != deckhandtype.JobRunning {
		t.Fatalf("resume: %s, %v; want running", state, err)
	}
	if job := e.Wait(id, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("after resume: %s%s", job.State, explain(detail(t, e, id)))
	}
	if _, err := e.Client.Resume(ctx, id); err == nil {
		t.Error("a finished job was resumed")
	}
}

// A pause now cancels the running task on its node and releases it without charging an
// attempt (it has one only); resumed, it runs again and succeeds.
func TestPauseNowReleasesRunningTasksUncharged(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE SEQUENCE runs`)
	e.Worker(engine.Config{Concurrency: 4})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "slow", Node: "n1", SQL: sleepsFirstTime, MaxAttempts: 1}}})
	sleeping := func() bool {
		var n int
		err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%pg_sleep(CASE%' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	}
	testenv.Eventually(t, 10*time.Second, sleeping, "the task sleeps on its node")
	start := time.Now()
	if _, err := e.Client.Pause(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	waitState(t, e, id, deckhandtype.JobPaused)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("pause --now took %s", took)
	}
	if sleeping() {
		t.Error("the paused task's backend still runs on the node")
	}
	d := detail(t, e, id)
	if tk := d.Tasks[0]; tk.State != deckhandtype.TaskPaused || tk.Attempts != 0 {
		t.Fatalf("task after pause --now: %s with %d attempts charged; want paused with 0", tk.State, tk.Attempts)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Outcome != deckhandtype.OutcomeReleased {
		t.Fatalf("attempts after pause --now:%s; want one, released", explain(d))
	}
	if _, err := e.Client.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("after resume: %s%s", job.State, explain(detail(t, e, id)))
	}
}

// A job paused while its worker shuts down stays paused: the released task is paused, not
// runnable, and the next worker does not claim it until the job is resumed.
func TestPauseOutlivesAWorkerRestart(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE SEQUENCE runs`)
	_, stop := e.Worker(engine.Config{Concurrency: 4, ShutdownGrace: 100 * time.Millisecond})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "slow", Node: "n1", SQL: sleepsFirstTime, MaxAttempts: 1}}})
	testenv.Eventually(t, 10*time.Second, func() bool { return task(t, e, id, "slow").State == deckhandtype.TaskRunning }, "the task runs")
	if state, err := e.Client.Pause(ctx, id, false); err != nil || state != deckhandtype.JobPausing {
		t.Fatalf("pause: %s, %v; want pausing", state, err)
	}
	stop() // the running task is released on shutdown
	waitState(t, e, id, deckhandtype.JobPaused)
	e.Worker(engine.Config{Concurrency: 4})
	time.Sleep(500 * time.Millisecond) // more than the new worker's poll
	if tk := task(t, e, id, "slow"); tk.State != deckhandtype.TaskPaused || tk.Attempts != 0 || tk.Runs != 1 {
		t.Fatalf("after the restart: %s, %d attempts, %d runs; want paused, 0, 1", tk.State, tk.Attempts, tk.Runs)
	}
	if _, err := e.Client.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("after resume: %s%s", job.State, explain(detail(t, e, id)))
	}
}

// A paused job holds no slot of its node: on a node that runs one task at a time, a job
// submitted after it runs while the paused one's task is never claimed; then cancelling the
// paused job cancels it at once.
func TestPausedJobLeavesItsNodeToOthers(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	e.AddNode("n1", 1)
	paused := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "first", Node: "n1", SQL: "SELECT 1"}}})
	if state, err := e.Client.Pause(ctx, paused, false); err != nil || state != deckhandtype.JobPaused {
		t.Fatalf("pause of a scheduled job: %s, %v; want paused", state, err)
	}
	other := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "x", Node: "n1", SQL: "SELECT pg_sleep(0.1)"}, {Name: "y", Node: "n1", SQL: "SELECT pg_sleep(0.1)"}}})
	e.Worker(engine.Config{Concurrency: 4})
	if job := e.Wait(other, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("the other job: %s", job.State)
	}
	if tk := task(t, e, paused, "first"); tk.State != deckhandtype.TaskPaused || tk.Runs != 0 {
		t.Fatalf("the paused job's task: %s after %d runs; want paused, never run", tk.State, tk.Runs)
	}
	if state, err := e.Client.Cancel(ctx, paused); err != nil || state != deckhandtype.JobCancelled {
		t.Fatalf("cancel of a paused job: %s, %v; want cancelled", state, err)
	}
	if state, err := e.Client.Retry(ctx, paused); err != nil || state != deckhandtype.JobScheduled {
		t.Fatalf("retry of the cancelled job: %s, %v; want scheduled", state, err)
	}
	if job := e.Wait(paused, 20*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("the retried job: %s", job.State)
	}
}

// A pause taken while a worker completes and claims a job's tasks as fast as it can: once the
// job is paused nothing of it is runnable or runs, and nothing starts until the resume; then
// every task runs and the job finishes, each task charged one attempt (a pause now releases
// the tasks it stops without charging them). One task (t45) holds until the test lets it go,
// so that a task surely runs when the pause comes: a pause now releases it, a pause that waits
// lets it finish.
func TestPauseWhileTasksComplete(t *testing.T) {
	t.Parallel()
	for _, now := range []bool{false, true} {
		t.Run("now="+strconv.FormatBool(now), func(t *testing.T) { pauseWhileTasksComplete(t, now) })
	}
}

func pauseWhileTasksComplete(t *testing.T, now bool) {
	const held = "t45" // in the third link of its chain: it runs once 40 tasks may have finished
	hold := make(chan struct{})
	var letGo sync.Once
	release := func() { letGo.Do(func() { close(hold) }) }
	defer release()
	nap := testenv.Kind("nap", false, engine.ExecutorFunc(func(ctx context.Context, tk *deckhandtype.ClaimedTask) error {
		nap := time.After(50 * time.Millisecond)
		var gate <-chan struct{}
		if tk.Name == held {
			nap, gate = nil, hold
		}
		select {
		case <-nap:
			return nil
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	e := testenv.New(t, nap)
	e.Worker(engine.Config{Concurrency: 16})
	var tasks []spec.Task
	for i := range 400 {
		tk := spec.Task{Name: "t" + strconv.Itoa(i), Kind: "nap", MaxAttempts: 1}
		if i >= 20 {
			tk.DependsOn = []string{"t" + strconv.Itoa(i-20)} // 20 chains: completions release dependents
		}
		tasks = append(tasks, tk)
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	testenv.Eventually(t, 10*time.Second, func() bool {
		d := detail(t, e, id)
		for _, tk := range d.Tasks {
			if tk.Name == held {
				return d.TasksDone >= 40 && tk.State == deckhandtype.TaskRunning
			}
		}
		return false
	}, "tasks complete and "+held+" runs")
	if _, err := e.Client.Pause(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	if !now {
		release() // the pause waits for it
	}
	waitState(t, e, id, deckhandtype.JobPaused)
	release() // released by the pause now: it runs again after the resume
	count := func() (runs int, states map[deckhandtype.TaskState]int) {
		states = map[deckhandtype.TaskState]int{}
		for _, tk := range detail(t, e, id).Tasks {
			runs += tk.Runs
			states[tk.State]++
		}
		return runs, states
	}
	runs, states := count()
	if states[deckhandtype.TaskRunnable]+states[deckhandtype.TaskRunning] != 0 || states[deckhandtype.TaskDone] == 400 {
		t.Fatalf("a paused job with tasks %v", states)
	}
	time.Sleep(300 * time.Millisecond)
	if later, _ := count(); later != runs {
		t.Fatalf("%d tasks started while the job was paused", later-runs)
	}
	if _, err := e.Client.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("after resume: %s%s", job.State, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	for _, tk := range d.Tasks {
		if tk.Attempts != 1 {
			t.Errorf("task %s: %d attempts charged, want 1", tk.Name, tk.Attempts)
		}
	}
	released := 0
	for _, a := range d.Attempts {
		if a.Outcome == deckhandtype.OutcomeReleased {
			released++
		}
	}
	if now != (released > 0) {
		t.Errorf("pause now=%v released %d attempts", now, released)
	}
}
