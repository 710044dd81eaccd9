package engine_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// soakPlan sizes a soak run.
type soakPlan struct {
	name            string
	tasks           int
	sleep           string // each task's pg_sleep before its INSERT: the window in which kills hit it
	catalogRestarts int    // spread evenly over the run
	crash           bool   // every other catalog restart is a crash (kill -9) of a durable catalog
	timeout         time.Duration
}

var (
	// soakShort runs in the normal suite, in about 20 s.
	soakShort = soakPlan{name: "short", tasks: 300, sleep: "0.3", catalogRestarts: 1, timeout: 3 * time.Minute}
	// soakLong runs with DECKHAND_SOAK=1 (see docs/testing.md).
	soakLong = soakPlan{name: "long", tasks: 20000, sleep: "0.1", catalogRestarts: 5, crash: true, timeout: 40 * time.Minute}
)

// The soak: thousands of transactional SQL tasks, each inserting its own number on the node,
// run by three `deckhand serve` processes while a random one of them is killed with SIGKILL
// every 0.6 s or so (and started again), and the catalog restarts mid-run. At the end the job
// is finished and every number is on the node exactly once: no task was lost, none took
// effect twice (the tasks are transactional: a rescued attempt whose transaction committed on
// the node is recorded done, not run again).
func TestSoak(t *testing.T) {
	plan := soakShort
	if os.Getenv("DECKHAND_SOAK") != "" {
		plan = soakLong
	}
	e := testenv.NewRestartable(t, pgcluster.Options{Durable: plan.crash})
	db := e.AddNode("n1", 16)
	e.Exec(db, `CREATE TABLE hits (n int)`)
	job := &spec.Job{Description: "soak"}
	for i := 1; i <= plan.tasks; i++ {
		job.Tasks = append(job.Tasks, spec.Task{Name: fmt.Sprintf("t%d", i), Node: "n1", MaxAttempts: 1000,
			SQL: fmt.Sprintf(`SELECT pg_sleep(%s); INSERT INTO hits VALUES (%d)`, plan.sleep, i)})
	}
	id := submit(t, e, job)
	began := time.Now()

	workers := newSoakWorkers(t, e, 3)
	defer workers.stop()
	node := e.Pool(db)
	var kills, restarts int
	var state deckhandtype.JobState
	for deadline := time.Now().Add(plan.timeout); ; {
		time.Sleep(400*time.Millisecond + rand.N(400*time.Millisecond))
		workers.killOne()
		kills++
		var hit int
		if err := node.QueryRow(ctx, `SELECT count(DISTINCT n) FROM hits`).Scan(&hit); err != nil {
			t.Fatal(err)
		}
		if restarts < plan.catalogRestarts && hit >= (restarts+1)*plan.tasks/(plan.catalogRestarts+1) {
			restarts++
			crash := plan.crash && restarts%2 == 0
			t.Logf("%s: %d of %d tasks done; restarting the catalog (crash: %v)", time.Since(began).Round(time.Second), hit, plan.tasks, crash)
			if crash {
				e.CatalogCluster.Kill()
			}
			if err := e.CatalogCluster.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if j, err := e.Client.JobRow(ctx, id); err == nil && j.State.Terminal() {
			state = j.State
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the job is not done: %d of %d tasks have run, %d kills, %d catalog restarts",
				plan.timeout, hit, plan.tasks, kills, restarts)
		}
	}
	took := time.Since(began)
	workers.stop()

	var missing []int
	rows, _ := node.Query(ctx, `SELECT g FROM generate_series(1, $1::int) g WHERE g NOT IN (SELECT n FROM hits) ORDER BY g`, plan.tasks)
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		missing = append(missing, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var duplicates int
	if err := node.QueryRow(ctx, `SELECT count(*) - count(DISTINCT n) FROM hits`).Scan(&duplicates); err != nil {
		t.Fatal(err)
	}
	var outcomes string
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT string_agg(outcome || ' ' || n, ', ' ORDER BY outcome)
		FROM (SELECT outcome, count(*) n FROM deckhand.task_attempts WHERE job_id = $1 GROUP BY outcome) o`, id).Scan(&outcomes); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak %s: %d tasks in %s; %d workers killed, %d catalog restarts; job %s; %d lost, %d duplicated; attempts: %s",
		plan.name, plan.tasks, took.Round(time.Second), kills, restarts, state, len(missing), duplicates, outcomes)
	if state != deckhandtype.JobFinished {
		t.Errorf("job %s, want finished", state)
	}
	if len(missing) > 0 {
		t.Errorf("%d tasks lost: their numbers are not on the node: %v", len(missing), missing[:min(len(missing), 20)])
	}
	if restarts < plan.catalogRestarts {
		t.Errorf("the catalog restarted %d times, want %d: the run ended too soon", restarts, plan.catalogRestarts)
	}
	if duplicates > 0 {
		t.Errorf("%d effects committed twice", duplicates)
	}
}

// soakWorkers are `deckhand serve` processes that the soak kills and starts again. Only the
// output of the ones still running is kept, for a failure message.
type soakWorkers struct {
	t     *testing.T
	e     *testenv.Env
	procs []*exec.Cmd
	out   []*testenv.Buffer
	seq   int
}

func newSoakWorkers(t *testing.T, e *testenv.Env, n int) *soakWorkers {
	w := &soakWorkers{t: t, e: e, procs: make([]*exec.Cmd, n), out: make([]*testenv.Buffer, n)}
	for i := range n {
		w.start(i)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, out := range w.out {
				t.Logf("worker %d output (tail):\n%s", i, tail(out.String(), 40))
			}
		}
	})
	return w
}

func (w *soakWorkers) start(i int) {
	w.seq++
	cmd := exec.Command(testenv.Binary(w.t), "serve", "--catalog", w.e.DSN, "--name", fmt.Sprintf("soak-%d", w.seq),
		"--lease", "1s", "--maintenance-interval", "100ms", "--poll-interval", "200ms", "--concurrency", "8")
	w.out[i] = &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = w.out[i], w.out[i]
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.procs[i] = cmd
}

// killOne kills a random worker with SIGKILL and starts another in its place.
func (w *soakWorkers) killOne() {
	i := rand.IntN(len(w.procs))
	w.kill(i)
	w.start(i)
}

func (w *soakWorkers) kill(i int) {
	if p := w.procs[i]; p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
		w.procs[i] = nil
	}
}

// stop kills every worker; it may be called more than once.
func (w *soakWorkers) stop() {
	for i := range w.procs {
		w.kill(i)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
