// Package bench measures deckhand's engine: noop and SQL task throughput, dependency
// hand-off latency along a chain, and throughput with a large catalog. It optionally runs
// River's reference benchmark (bench/rivercmp) on the same server in the same run.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/spec"
)

// Options choose what to measure.
type Options struct {
	CatalogDSN  string // server to use; empty starts a throwaway cluster
	Tasks       int    // noop and SQL throughput runs
	SQLTasks    int
	Chain       int // links in the dependency chain
	Finished    int // finished tasks preloaded for the scale run (0 skips it)
	Workers     int // worker processes (in-process here)
	Concurrency int // per worker
	NodeMax     int // max_tasks of the SQL node
	RiverDir    string
}

// Result holds the figures, printed as key=value on the last line.
type Result struct {
	TasksPerS       float64
	WorkTasksPerS   float64
	SQLTasksPerS    float64
	ChainP50MS      float64
	ChainP99MS      float64
	ScaleTasksPerS  float64
	ScaleRatio      float64
	River           map[string]string
	ServerVersion   string
	ThroughputSpans []time.Duration
}

// Run performs every measurement and writes a report to out.
func Run(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	server, stopServer, err := startServer(ctx, o.CatalogDSN, out)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.Background()) //nolint:errcheck
	res := &Result{}
	if err := admin.QueryRow(ctx, `SHOW server_version`).Scan(&res.ServerVersion); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "server: PostgreSQL %s; %d worker(s) x concurrency %d\n", res.ServerVersion, o.Workers, o.Concurrency)

	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return nil, err
	}
	defer dropCatalog()
	// The SQL node is another scratch database on the same server.
	nodeDB, dropNode, err := scratchDB(ctx, admin, "deckhand_bench_node")
	if err != nil {
		return nil, err
	}
	defer dropNode()
	if err := client.AddNode(ctx, deckhandtype.Node{Name: "bench", DSN: withDB(server, nodeDB), MaxTasks: o.NodeMax}); err != nil {
		return nil, err
	}
	rec := &recorder{}
	stop, err := startWorkers(ctx, dsn, o, rec)
	if err != nil {
		return nil, err
	}
	defer stop()

	// Warm up connections and caches so the first run is not penalised.
	if _, err := runJob(ctx, client, noopJob(2000)); err != nil {
		return nil, err
	}
	d, work, err := runJobSplit(ctx, client, noopJob(o.Tasks))
	if err != nil {
		return nil, err
	}
	res.TasksPerS = float64(o.Tasks) / d.Seconds()
	res.WorkTasksPerS = float64(o.Tasks) / work.Seconds()
	fmt.Fprintf(out, "noop:  %d tasks in %s = %.0f tasks/s (submission to all done); %.0f tasks/s once submitted\n",
		o.Tasks, d.Round(time.Millisecond), res.TasksPerS, res.WorkTasksPerS)

	if o.Chain > 0 {
		p50, p99, err := chainLatency(ctx, client, o.Chain, rec)
		if err != nil {
			return nil, err
		}
		res.ChainP50MS, res.ChainP99MS = p50, p99
		fmt.Fprintf(out, "chain: %d dependent tasks; completion-to-dependent-start p50 %.2f ms, p99 %.2f ms\n", o.Chain, p50, p99)
	}

	if o.Finished > 0 {
		fmt.Fprintf(out, "scale: loading %d finished tasks into the catalog...\n", o.Finished)
		if err := preloadFinished(ctx, client, o.Finished); err != nil {
			return nil, err
		}
		d, err := runJob(ctx, client, noopJob(o.Tasks))
		if err != nil {
			return nil, err
		}
		res.ScaleTasksPerS = float64(o.Tasks) / d.Seconds()
		res.ScaleRatio = res.ScaleTasksPerS / res.TasksPerS
		fmt.Fprintf(out, "scale: %d noop tasks with %d finished in the catalog: %.0f tasks/s (%.0f%% of empty)\n",
			o.Tasks, o.Finished, res.ScaleTasksPerS, 100*res.ScaleRatio)
	}
	// SQL tasks last: their node's pools and rows do not weigh on the noop figures above.
	if o.SQLTasks > 0 {
		d, err = runJob(ctx, client, sqlJob(o.SQLTasks))
		if err != nil {
			return nil, err
		}
		res.SQLTasksPerS = float64(o.SQLTasks) / d.Seconds()
		fmt.Fprintf(out, "sql:   %d `SELECT 1` tasks on one node (max_tasks %d) in %s = %.0f tasks/s\n",
			o.SQLTasks, o.NodeMax, d.Round(time.Millisecond), res.SQLTasksPerS)
	}

	stop()

	if o.RiverDir != "" {
		riverDB, dropRiver, err := scratchDB(ctx, admin, "deckhand_bench_river")
		if err != nil {
			return nil, err
		}
		defer dropRiver()
		fmt.Fprintf(out, "river: running the reference benchmark in %s on the same server...\n", o.RiverDir)
		res.River, err = runRiver(ctx, o.RiverDir, withDB(server, riverDB), o.Tasks, o.Chain, out)
		if err != nil {
			fmt.Fprintf(out, "river: skipped: %v\n", err)
		}
	}
	return res, nil
}

// startServer returns the server to measure on: dsn, or a throwaway cluster with stock
// durability settings.
func startServer(ctx context.Context, dsn string, out io.Writer) (string, func(), error) {
	if dsn != "" {
		return dsn, func() {}, nil
	}
	fmt.Fprintln(out, "starting a throwaway PostgreSQL cluster (stock durability settings)...")
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
	if err != nil {
		return "", nil, err
	}
	return cl.DSN("postgres", pgcluster.Superuser), func() { cl.Stop() }, nil //nolint:errcheck
}

// Line is the machine-readable summary.
func (r *Result) Line() string {
	parts := []string{
		fmt.Sprintf("tasks_per_s=%.0f", r.TasksPerS),
		fmt.Sprintf("work_tasks_per_s=%.0f", r.WorkTasksPerS),
		fmt.Sprintf("sql_tasks_per_s=%.0f", r.SQLTasksPerS),
		fmt.Sprintf("chain_p50_ms=%.2f", r.ChainP50MS),
		fmt.Sprintf("chain_p99_ms=%.2f", r.ChainP99MS),
	}
	if r.ScaleTasksPerS > 0 {
		parts = append(parts, fmt.Sprintf("scale_tasks_per_s=%.0f", r.ScaleTasksPerS), fmt.Sprintf("scale_ratio=%.2f", r.ScaleRatio))
	}
	keys := make([]string, 0, len(r.River))
	for k := range r.River {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+r.River[k])
	}
	return strings.Join(parts, " ")
}

// withDB is dsn connecting to database db, in either conninfo form.
func withDB(dsn, db string) string { return nodeconn.WithDBName(dsn, db) }

func scratchDB(ctx context.Context, admin *pgx.Conn, prefix string) (string, func(), error) {
	name := fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create scratch database: %w", err)
	}
	return name, func() {
		admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
	}, nil
}

// scratchCatalog creates a scratch database on server holding an initialised catalog, and
// returns its conninfo and a client on it; cleanup closes the client and drops the database.
func scratchCatalog(ctx context.Context, admin *pgx.Conn, server string) (dsn string, client *engine.Client, cleanup func(), err error) {
	db, dropDB, err := scratchDB(ctx, admin, "deckhand_bench")
	if err != nil {
		return "", nil, nil, err
	}
	dsn = withDB(server, db)
	cat, err := catalog.Open(ctx, dsn)
	if err == nil {
		_, err = cat.Migrate(ctx)
		cat.Close()
	}
	if err == nil {
		client, err = engine.Open(ctx, dsn, benchFeature(nil), drop.Feature())
	}
	if err != nil {
		dropDB()
		return "", nil, nil, err
	}
	return dsn, client, func() { client.Close(); dropDB() }, nil
}

func startWorkers(ctx context.Context, dsn string, o Options, rec *recorder) (func(), error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var cats []*catalog.Catalog
	for i := range o.Workers {
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			cancel()
			return nil, err
		}
		cats = append(cats, cat)
		w := engine.NewWorker(cat, engine.Config{Name: "bench-" + strconv.Itoa(i), Concurrency: o.Concurrency,
			Features: []engine.Feature{benchFeature(rec), export.Feature()}})
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(runCtx) }() //nolint:errcheck
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			for _, c := range cats {
				c.Close()
			}
		})
	}, nil
}

func noopJob(n int) *spec.Job {
	j := &spec.Job{Description: fmt.Sprintf("bench: %d noop tasks", n), Tasks: make([]spec.Task, n)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: "t" + strconv.Itoa(i), Kind: benchKind}
	}
	return j
}

func sqlJob(n int) *spec.Job {
	j := &spec.Job{Description: fmt.Sprintf("bench: %d SELECT 1 tasks", n), Tasks: make([]spec.Task, n)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: "t" + strconv.Itoa(i), Node: "bench", SQL: "SELECT 1"}
	}
	return j
}

// runJob times a job from the start of its submission to its end.
func runJob(ctx context.Context, c *engine.Client, j *spec.Job) (time.Duration, error) {
	total, _, err := runJobSplit(ctx, c, j)
	return total, err
}

// runJobSplit times a job from the start of its submission to its end, and from the moment
// the submission committed (the work alone, as River's work-only figure counts it).
func runJobSplit(ctx context.Context, c *engine.Client, j *spec.Job) (total, work time.Duration, err error) {
	start := time.Now()
	id, err := c.Submit(ctx, j)
	if err != nil {
		return 0, 0, err
	}
	submitted := time.Now()
	job, err := c.Wait(ctx, id, nil)
	if err != nil {
		return 0, 0, err
	}
	if job.State != deckhandtype.JobFinished {
		return 0, 0, fmt.Errorf("bench job %d ended %s", id, job.State)
	}
	return job.FinishedAt.Sub(start), job.FinishedAt.Sub(submitted), nil
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

// runRiver runs River's reference benchmark and returns its key=value summary.
func runRiver(ctx context.Context, dir, dsn string, jobs, chain int, out io.Writer) (map[string]string, error) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil, fmt.Errorf("%s is not the rivercmp module: %w", dir, err)
	}
	cmd := exec.CommandContext(ctx, "go", "run", ".", "--dsn", dsn, "--jobs", strconv.Itoa(jobs), "--chain", strconv.Itoa(chain))
	cmd.Dir = dir
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var last string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		last = sc.Text()
		fmt.Fprintln(out, "  "+last)
	}
	if err := cmd.Wait(); err != nil {
		return nil, err
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(last) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv, nil
}
