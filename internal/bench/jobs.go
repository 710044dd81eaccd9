package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// Nodes the bench registers: SQL tasks run on sqlNode (max_tasks from Options.NodeMax);
// node-targeted noop tasks go to wideNode, whose max_tasks is the workers' concurrency, so
// that they measure the claim of node-bound tasks rather than a node's slots.
const (
	sqlNode  = "bench"
	wideNode = "bench-wide"
)

// noopJob is n tasks that do nothing, on node when given (a node's claims take its lock and
// count its running tasks), anywhere otherwise.
func noopJob(n int, node string) *spec.Job {
	j := &spec.Job{Description: fmt.Sprintf("bench: %d noop tasks", n), Tasks: make([]spec.Task, n)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: "t" + strconv.Itoa(i), Kind: benchKind, Node: node}
	}
	return j
}

// sqlJob is n `SELECT 1` tasks on nodes, round-robin.
func sqlJob(n int, nodes ...string) *spec.Job {
	j := &spec.Job{Description: fmt.Sprintf("bench: %d SELECT 1 tasks", n), Tasks: make([]spec.Task, n)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: "t" + strconv.Itoa(i), Node: nodes[i%len(nodes)], SQL: "SELECT 1"}
	}
	return j
}

// runJob times a job from the start of its submission to its end.
func runJob(ctx context.Context, c *engine.Client, j *spec.Job) (time.Duration, error) {
	total, _, err := runJobSplit(ctx, c, j)
	return total, err
}

// runJobSplit times a job from the start of its submission to its end, and from the moment
// the submission committed (the work alone, as River's work-only figure counts it). Both ends
// are read on this process's clock: the end when the wait for the job hears that it ended
// (a notification, milliseconds), not the job's finished_at, which the catalog's clock wrote
// (another machine's, perhaps) and which can even precede the moment Submit returned here
// when a small job ends within the submission's round trip.
func runJobSplit(ctx context.Context, c *engine.Client, j *spec.Job) (total, work time.Duration, err error) {
	return runJobThen(ctx, c, j, nil)
}

// runJobThen is runJobSplit calling submitted (unless nil) once the submission committed.
func runJobThen(ctx context.Context, c *engine.Client, j *spec.Job, submitted func()) (total, work time.Duration, err error) {
	start := time.Now()
	id, err := c.Submit(ctx, j)
	if err != nil {
		return 0, 0, err
	}
	committed := time.Now()
	if submitted != nil {
		submitted()
	}
	job, err := c.Wait(ctx, id, nil)
	if err != nil {
		return 0, 0, err
	}
	ended := time.Now()
	if job.State != deckhandtype.JobFinished {
		return 0, 0, fmt.Errorf("bench job %d ended %s", id, job.State)
	}
	return ended.Sub(start), ended.Sub(committed), nil
}

// benchKind is the task kind of the throughput and latency runs: it does nothing but note, in
// a recorder, when each task starts and ends.
const benchKind = "bench_noop"

// benchFeature runs benchKind tasks with rec (nil for a client, which only submits them).
func benchFeature(rec *recorder) engine.Feature {
	return engine.Feature{Name: "bench", Kinds: []engine.Kind{{Name: benchKind,
		New: func(engine.Deps) engine.Executor { return rec }}}}
}

// recorder is the executor of benchKind, noting when each task starts and ends while it is on.
type recorder struct {
	on     atomic.Bool
	mu     sync.Mutex
	starts map[int64]time.Time
	ends   map[int64]time.Time
}

func (r *recorder) Run(_ context.Context, t *deckhandtype.ClaimedTask) error {
	if !r.on.Load() {
		return nil
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts[t.ID] = now
	r.ends[t.ID] = time.Now()
	return nil
}

func (r *recorder) record(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.starts, r.ends = map[int64]time.Time{}, map[int64]time.Time{}
	}
	r.on.Store(on)
}

// chainLatency runs n noop tasks each depending on the previous one and measures, in the
// worker, the time from a task's end to its dependent's start: the completion is recorded,
// the dependent released, claimed and started.
func chainLatency(ctx context.Context, c *engine.Client, n int, rec *recorder) (p50, p99 float64, err error) {
	j := &spec.Job{Description: fmt.Sprintf("bench: chain of %d", n), Tasks: make([]spec.Task, n)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: "c" + strconv.Itoa(i), Kind: benchKind}
		if i > 0 {
			j.Tasks[i].DependsOn = []string{"c" + strconv.Itoa(i-1)}
		}
	}
	rec.record(true)
	_, err = runJob(ctx, c, j)
	rec.record(false)
	if err != nil {
		return 0, 0, err
	}
	ids := make([]int64, 0, len(rec.starts))
	for id := range rec.starts {
		ids = append(ids, id)
	}
	slices.Sort(ids) // tasks are stored in dependency order: each id's prerequisite is the one before
	var lat []float64
	for i := 1; i < len(ids); i++ {
		lat = append(lat, float64(rec.starts[ids[i]].Sub(rec.ends[ids[i-1]]).Microseconds())/1000)
	}
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("chain: no hand-offs measured")
	}
	slices.Sort(lat)
	return percentile(lat, 0.50), percentile(lat, 0.99), nil
}

func percentile(sorted []float64, p float64) float64 {
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// preloadFinished writes n finished tasks (with their attempts) as one old job, as a busy
// catalog accumulates them, then vacuums so the planner sees the real table sizes.
func preloadFinished(ctx context.Context, c *engine.Client, n int) error {
	_, err := c.Catalog().Pool.Exec(ctx, `
		WITH j AS (
			INSERT INTO deckhand.job (description, kind, tasks_total, tasks_done, started_at)
			VALUES ('bench: preloaded history', 'noop', $1, $1, now()) RETURNING id
		), t AS (
			INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state, attempts, runs,
				attempt_token, started_at, finished_at)
			SELECT j.id, 'old' || g, 'noop', 'bench', 3, '1 hour', 'done', 1, 1, g, now(), now()
			FROM j, generate_series(1, $1) g
			RETURNING id, attempt_token
		)
		INSERT INTO deckhand.task_attempt (task_id, token, attempt, outcome, started_at, finished_at)
		SELECT id, attempt_token, 1, 'done', now(), now() FROM t`, n)
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	for _, table := range []string{"deckhand.task", "deckhand.task_attempt", "deckhand.task_dep", "deckhand.job"} {
		if _, err := c.Catalog().Pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			return err
		}
	}
	return nil
}

// bigJobs are the shapes submitted at scale: a chain of n tasks, and a fan-out/fan-in (one
// task, n-2 depending on it, one depending on all of those).
func bigJobs(n int) map[string]*spec.Job {
	chain := &spec.Job{Description: fmt.Sprintf("bench: chain of %d", n), Tasks: make([]spec.Task, n)}
	fan := &spec.Job{Description: fmt.Sprintf("bench: fan-out/fan-in of %d", n), Tasks: make([]spec.Task, n)}
	var all []string
	for i := range n {
		name := "t" + strconv.Itoa(i)
		chain.Tasks[i] = spec.Task{Name: name, Kind: benchKind}
		fan.Tasks[i] = spec.Task{Name: name, Kind: benchKind}
		if i > 0 {
			chain.Tasks[i].DependsOn = []string{"t" + strconv.Itoa(i-1)}
		}
		switch {
		case i == n-1:
			fan.Tasks[i].DependsOn = all
		case i > 0:
			fan.Tasks[i].DependsOn = []string{"t0"}
			all = append(all, name)
		}
	}
	return map[string]*spec.Job{"chain": chain, "fan-out/fan-in": fan}
}

// timeSubmission submits j and cancels it at once: only the submission is measured.
func timeSubmission(ctx context.Context, c *engine.Client, j *spec.Job) (time.Duration, error) {
	start := time.Now()
	id, err := c.Submit(ctx, j)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	_, err = c.Cancel(ctx, id)
	return took, err
}

// idleClaim times claims when nothing is runnable, as a worker makes them every poll, and
// returns the median in milliseconds.
func idleClaim(ctx context.Context, c *engine.Client, n int) (float64, error) {
	var took []float64
	for range n {
		start := time.Now()
		claimed, err := c.Catalog().Claim(ctx, 0, 100)
		if err != nil {
			return 0, err
		}
		if len(claimed) > 0 {
			return 0, fmt.Errorf("idle claim: %d tasks were runnable", len(claimed))
		}
		took = append(took, float64(time.Since(start).Microseconds())/1000)
	}
	slices.Sort(took)
	return percentile(took, 0.5), nil
}
