// Package demo runs `deckhand demo`: one real job end to end on this machine. Without a
// catalog it starts a throwaway PostgreSQL cluster holding the catalog and two target
// databases; with one it uses the nodes already registered there. Either way it submits a
// DAG job through engine.Client, runs it with two in-process workers, shows progress, prints
// a summary, reads the result back from the nodes, and leaves nothing running.
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/conninfo"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/spec"
)

// Defaults of Options.
const (
	DefaultOwner   = "app"
	DefaultRows    = 200_000
	DefaultWorkers = 2
	// Schema holds everything the demo creates on a node, so that it never touches a user's
	// own tables when it runs against a real catalog.
	Schema = "deckhand_demo"

	catalogDB       = "deckhand"
	nodeMaxTasks    = 4
	workerTasks     = 4
	shutdownGrace   = 5 * time.Second
	customersPerRow = 10 // one customer per this many orders
)

// DefaultNodes are the nodes the demo creates, or expects in a configured catalog.
var DefaultNodes = []string{"eu", "us"}

// ErrJobFailed is returned (wrapped) when the demo job ends failed or cancelled.
var ErrJobFailed = errors.New("demo job failed")

// ErrInterrupted is returned (wrapped) when ctx ends before the demo does (Ctrl-C).
var ErrInterrupted = errors.New("demo interrupted")

// Status draws a live status line; *cli.Progress implements it. Update redraws the line on a
// terminal and does nothing elsewhere; Done replaces it with a permanent line.
type Status interface {
	Terminal() bool
	Update(line string)
	Done(final string)
}

// Options tune the demo. The zero value starts a throwaway cluster with the defaults.
type Options struct {
	// CatalogDSN, when set, is an initialised catalog whose Nodes are registered already;
	// no cluster is started then. Empty: start a throwaway cluster.
	CatalogDSN string
	// Nodes are the node names to run on (default eu, us). The fan-in report runs on the first.
	Nodes []string
	// Owner is the role the tasks run as (default app). On a throwaway cluster it is created;
	// otherwise it must exist on the nodes and be allowed to create a schema in their database.
	Owner string
	// Rows is how many orders each node loads (default 200,000); customers are a tenth of it.
	Rows int
	// Workers is how many in-process workers run the job (default 2).
	Workers int
	// Status shows live progress; nil prints state changes as plain lines on out.
	Status Status
	// Bar renders a progress bar (cli.Bar); nil renders "done/total".
	Bar func(done, total, width int) string
	// Logger receives the workers' logs; nil discards them.
	Logger *slog.Logger
}

// Validate checks the options without touching anything.
func (o Options) Validate() error {
	o = o.withDefaults()
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if n == "" || len(n) > 63 || strings.ContainsFunc(n, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
		}) {
			return fmt.Errorf("node name %q: want 1-63 letters, digits, '_', '.' or '-'", n)
		}
		if seen[n] {
			return fmt.Errorf("node %q is listed twice", n)
		}
		seen[n] = true
	}
	if o.Owner == "" || len(o.Owner) > 63 || strings.ContainsRune(o.Owner, 0) {
		return fmt.Errorf("owner %q: want a role name of 1-63 bytes", o.Owner)
	}
	if o.Rows < 1 || o.Rows > 100_000_000 {
		return fmt.Errorf("rows must be between 1 and 100000000, got %d", o.Rows)
	}
	if o.Workers < 1 || o.Workers > 16 {
		return fmt.Errorf("workers must be between 1 and 16, got %d", o.Workers)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if len(o.Nodes) == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Owner == "" {
		o.Owner = DefaultOwner
	}
	if o.Rows == 0 {
		o.Rows = DefaultRows
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// customers is how many customers each node gets for Options.Rows orders.
func (o Options) customers() int { return max(1, o.Rows/customersPerRow) }

// Run runs the demo, writing its report to out. It returns nil when the job finished and its
// result was read back from every node, an error wrapping ErrJobFailed when the job failed,
// and one wrapping ErrInterrupted when ctx ended first. Whatever happens it stops its workers
// and, if it started one, its cluster (removing its directory) before returning.
func Run(ctx context.Context, opts Options, out io.Writer) (err error) {
	if err := opts.Validate(); err != nil {
		return &spec.Error{Msg: err.Error()}
	}
	opts = opts.withDefaults()
	job, err := buildJob(opts)
	if err != nil {
		// The embedded spec is broken, whatever the options: not the caller's bad input.
		return fmt.Errorf("the demo's job.yaml: %v", err)
	}
	r := &runner{opts: opts, out: out, status: opts.Status, start: time.Now()}
	if r.status == nil {
		r.status = plainStatus{out}
	}
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrJobFailed) && !errors.Is(err, ErrInterrupted) {
			err = ErrInterrupted // whatever failed, failed because of the interruption
		}
	}()

	defer func() {
		// Deferred before the cleanups, so it runs after them: the workers and cluster are gone.
		if err == nil {
			fmt.Fprintf(out, "demo finished in %s (the job itself %s); nothing left running\n", since(r.start), r.jobTime)
		}
	}()
	fmt.Fprintf(out, "deckhand demo: one job of SQL tasks across %d nodes, run by %d in-process workers\n", len(opts.Nodes), opts.Workers)
	fmt.Fprintln(out)
	if opts.CatalogDSN == "" {
		cl, err := r.startCluster(ctx)
		if cl != nil {
			defer r.stopCluster(cl)
		}
		if err != nil {
			return err
		}
	} else {
		r.catalogDSN = opts.CatalogDSN
	}

	client, err := engine.Open(ctx, r.catalogDSN)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := r.loadNodes(ctx, client); err != nil {
		return err
	}

	ws, err := r.startWorkers(ctx)
	if err != nil {
		return err
	}
	defer ws.stop(r)

	return r.runJob(ctx, client, ws, job)
}

type runner struct {
	opts       Options
	out        io.Writer
	status     Status
	start      time.Time
	catalogDSN string
	nodes      []catalog.Node // in opts.Nodes order
	jobTime    string
}

// plainStatus is the Status for a plain writer: only permanent lines appear.
type plainStatus struct{ w io.Writer }

func (plainStatus) Terminal() bool      { return false }
func (plainStatus) Update(string)       {}
func (p plainStatus) Done(final string) { fmt.Fprintln(p.w, final) }

func (r *runner) printf(format string, args ...any) { fmt.Fprintf(r.out, format, args...) }

func (r *runner) bar(done, total, width int) string {
	if r.opts.Bar != nil {
		return r.opts.Bar(done, total, width)
	}
	return fmt.Sprintf("%d/%d", done, total)
}

// nodeDB is the database a node of the throwaway cluster lives in.
func nodeDB(node string) string { return "shop_" + node }

// startCluster starts the throwaway cluster and prepares the catalog, the node databases and
// the owner role on it. It returns the cluster, if it started, even on error, so that the
// caller stops it.
func (r *runner) startCluster(ctx context.Context) (*pgtest.Cluster, error) {
	r.status.Update("starting a throwaway PostgreSQL cluster…")
	t0 := time.Now()
	cl, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		r.status.Done("could not start PostgreSQL")
		return nil, err
	}
	conn, err := cl.Connect(ctx, "postgres")
	if err != nil {
		return cl, err
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	var version string
	if err := conn.QueryRow(ctx, "SELECT split_part(current_setting('server_version'), ' ', 1)").Scan(&version); err != nil {
		return cl, err
	}
	r.status.Done(fmt.Sprintf("  postgres  PostgreSQL %s on %s, started in %s\n            a throwaway cluster in %s, removed on exit",
		version, cl.Addr(), since(t0), cl.Dir))

	owner := pgx.Identifier{r.opts.Owner}.Sanitize()
	stmts := []string{
		"CREATE ROLE " + owner + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
		"CREATE DATABASE " + catalogDB,
	}
	for _, n := range r.opts.Nodes {
		stmts = append(stmts, "CREATE DATABASE "+pgx.Identifier{nodeDB(n)}.Sanitize()+" OWNER "+owner)
	}
	for _, s := range stmts {
		// CREATE DATABASE refuses a transaction block, so one statement at a time.
		if _, err := conn.Exec(ctx, s); err != nil {
			return cl, fmt.Errorf("prepare the cluster: %s: %w", s, err)
		}
	}
	r.catalogDSN = cl.DSN(catalogDB, pgtest.Superuser)
	cat, err := catalog.Open(ctx, r.catalogDSN)
	if err != nil {
		return cl, err
	}
	defer cat.Close()
	if _, err := cat.Migrate(ctx); err != nil {
		return cl, err
	}
	var dbs []string
	for _, n := range r.opts.Nodes {
		err := cat.AddNode(ctx, catalog.Node{Name: n, DSN: cl.DSN(nodeDB(n), pgtest.Superuser), Group: n, MaxTasks: nodeMaxTasks})
		if err != nil {
			return cl, err
		}
		dbs = append(dbs, nodeDB(n))
	}
	r.printf("  catalog   database %s, schema version %d (deckhand init)\n", catalogDB, catalog.SchemaVersion())
	r.printf("  owner     role %s: LOGIN, not a superuser, owns %s\n", r.opts.Owner, strings.Join(dbs, ", "))
	return cl, nil
}

func (r *runner) stopCluster(cl *pgtest.Cluster) {
	r.status.Update("stopping PostgreSQL…")
	t0 := time.Now()
	if err := cl.Stop(); err != nil {
		r.status.Done("  could not stop PostgreSQL cleanly: " + oneLine(err))
		return
	}
	r.status.Done(fmt.Sprintf("stopped PostgreSQL on %s and removed %s (%s)", cl.Addr(), cl.Dir, since(t0)))
}

// loadNodes reads the demo's nodes from the catalog; each must be registered.
func (r *runner) loadNodes(ctx context.Context, client *engine.Client) error {
	byName, err := client.Catalog.NodesByName(ctx, r.opts.Nodes)
	if err != nil {
		return err
	}
	var missing, shown []string
	for _, n := range r.opts.Nodes {
		node, ok := byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		r.nodes = append(r.nodes, node)
		where := "database " + dbName(node.DSN)
		shown = append(shown, fmt.Sprintf("%s (%s, at most %d tasks)", n, where, node.MaxTasks))
	}
	if len(missing) > 0 {
		return fmt.Errorf("node %s: %w in the catalog: register with `deckhand node add NAME --dsn CONNINFO` or pass --nodes",
			strings.Join(missing, ", "), catalog.ErrNotFound)
	}
	if r.opts.CatalogDSN != "" {
		r.printf("  catalog   %s (configured; the demo's tables go to schema %s on each node)\n", conninfo.Redact(r.catalogDSN), Schema)
		r.printf("  owner     role %s\n", r.opts.Owner)
	}
	r.printf("  nodes     %s\n", strings.Join(shown, "; "))
	return nil
}

// dbName is the database a conninfo names, for display.
func dbName(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil && cfg.Database != "" {
		return cfg.Database
	}
	return "?"
}

type workers struct {
	names  map[int64]string // catalog worker id → name
	ws     []*engine.Worker
	cats   []*catalog.Catalog
	cancel context.CancelFunc
	done   chan struct{}
	// failed is closed when a worker stops on its own; err says why.
	failed   chan struct{}
	failOnce sync.Once
	err      error
	stopped  bool
}

// startWorkers runs the in-process workers until stop; each has its own catalog pool, as
// separate `deckhand serve` processes would.
func (r *runner) startWorkers(ctx context.Context) (*workers, error) {
	// The workers outlive ctx: on Ctrl-C they must shut down gracefully, not be cut off.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ws := &workers{names: map[int64]string{}, cancel: cancel, done: make(chan struct{}), failed: make(chan struct{})}
	var wg sync.WaitGroup
	var names []string
	for i := range r.opts.Workers {
		cat, err := catalog.Open(ctx, r.catalogDSN)
		if err != nil {
			cancel()
			wg.Wait()
			for _, c := range ws.cats {
				c.Close()
			}
			return nil, err
		}
		name := fmt.Sprintf("demo-%d", i+1)
		names = append(names, name)
		w := engine.NewWorker(cat, engine.Config{
			Name: name, Concurrency: workerTasks, ShutdownGrace: shutdownGrace,
			LeaseTTL: 10 * time.Second, Logger: r.opts.Logger,
		})
		ws.ws = append(ws.ws, w)
		ws.cats = append(ws.cats, cat)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.Run(wctx)
			if wctx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				ws.failOnce.Do(func() { ws.err = fmt.Errorf("worker %s: %w", name, err); close(ws.failed) })
			}
		}()
	}
	go func() { wg.Wait(); close(ws.done) }()
	// Registration gives each worker its id, by which attempts name the worker that ran them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, w := range ws.ws {
			all = all && w.ID() != 0
		}
		if all {
			break
		}
		select {
		case <-ws.failed:
			ws.stop(r)
			return nil, ws.err
		case <-ctx.Done():
			ws.stop(r)
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			ws.stop(r)
			return nil, errors.New("workers did not register within 10s")
		}
	}
	for i, w := range ws.ws {
		ws.names[w.ID()] = names[i]
	}
	r.printf("  workers   %s, in this process, %d tasks at a time each\n", strings.Join(names, " and "), workerTasks)
	return ws, nil
}

// stop shuts the workers down gracefully and waits for them.
func (ws *workers) stop(r *runner) {
	if ws.stopped {
		return
	}
	ws.stopped = true
	r.status.Update("stopping workers…")
	ws.cancel()
	<-ws.done
	for _, c := range ws.cats {
		c.Close()
	}
	r.status.Update("")
}

// printDAG draws the job's shape, generated from the node names, and what each step does.
func (r *runner) printDAG(job *spec.Job, submitter string) {
	r.printf("\nthe job: %d tasks, submitted by %s; every task runs as role %s\n\n", len(job.Tasks), submitter, r.opts.Owner)
	w, m := 0, 0
	for _, n := range r.opts.Nodes {
		w = max(w, len(n))
		m = max(m, runes(n+"/customers ─"), runes(n+"/orders ── "+n+"/index ─"))
	}
	m++
	a := w + len("/tables")
	for i, n := range r.opts.Nodes {
		join := "┤"
		if i == 0 {
			join = "┐"
		}
		r.printf("  %s ─┬─ %s┬─ %s%s\n", pad(n+"/tables", a, " "), pad(n+"/customers ─", m, "─"), pad(n+"/analyze ─", w+10, "─"), join)
		r.printf("  %s  └─ %s┘%s│\n", strings.Repeat(" ", a), pad(n+"/orders ── "+n+"/index ─", m, "─"), strings.Repeat(" ", w+12))
	}
	r.printf("  %s└─ report (on %s)\n\n", strings.Repeat(" ", a+5+m+w+13), r.opts.Nodes[0])
	r.printf("  tables     CREATE SCHEMA %s; CREATE TABLE customers, orders\n", Schema)
	r.printf("  customers  INSERT %s rows from generate_series\n", thousands(r.opts.customers()))
	r.printf("  orders     INSERT %s rows from generate_series\n", thousands(r.opts.Rows))
	r.printf("  index      CREATE INDEX CONCURRENTLY on orders (customer_id), outside a transaction\n")
	r.printf("  analyze    ANALYZE orders, customers\n")
	r.printf("  report     top 10 customers by revenue on %s, once every node is ready (fan-in)\n\n", r.opts.Nodes[0])
}

func runes(s string) int { return len([]rune(s)) }

// pad fills s up to n runes with fill.
func pad(s string, n int, fill string) string { return s + strings.Repeat(fill, max(0, n-runes(s))) }

// runJob submits the job, waits for it with live progress, prints the summary and verifies
// the result on the nodes.
func (r *runner) runJob(ctx context.Context, client *engine.Client, ws *workers, job *spec.Job) error {
	var submitter string
	if err := client.Catalog.Pool.QueryRow(ctx, "SELECT session_user").Scan(&submitter); err != nil {
		return fmt.Errorf("read the catalog user: %w", err)
	}
	r.printDAG(job, submitter)
	submitted := time.Now()
	id, err := client.Submit(ctx, job)
	if err != nil {
		return err
	}

	// Wait until the job ends, Ctrl-C, or a worker dies.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-ws.failed:
			cancel(ws.err)
		case <-wctx.Done():
		}
	}()
	watch := &watcher{r: r, client: client, id: id, since: submitted, workers: ws.names, printed: map[string]bool{}}
	for _, t := range job.Tasks {
		watch.width = max(watch.width, len(t.Name))
	}
	final, err := client.Wait(wctx, id, func(j catalog.Job) { watch.update(wctx, j) })
	if err != nil {
		if cause := context.Cause(wctx); cause != nil {
			err = cause
		}
		reason := oneLine(err)
		if ctx.Err() != nil {
			reason = "interrupted"
		}
		watch.flush()
		r.status.Done(fmt.Sprintf("job %d: %s after %s; cancelling it", id, reason, since(submitted)))
		// Cancel the job so that its running statements stop now rather than after the
		// workers' shutdown grace, and so that no other worker picks it up later.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer ccancel()
		if state, cerr := client.Cancel(cctx, id); cerr == nil {
			r.printf("job %d %s\n", id, state)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: job %d cancelled", ErrInterrupted, id)
		}
		return fmt.Errorf("waiting for job %d: %w", id, err)
	}
	r.status.Done(fmt.Sprintf("job %d %s: %s in %s", id, final.State, countsText(final), jobDuration(final)))
	r.jobTime = jobDuration(final)
	// The workers have nothing left to do: stop them before reading the result back.
	ws.stop(r)

	detail, err := client.Job(context.WithoutCancel(ctx), id)
	if err != nil {
		return err
	}
	r.printSummary(detail, ws.names)
	if final.State != catalog.JobFinished {
		return fmt.Errorf("%w: job %d %s (%d of %d tasks done); see the errors above", ErrJobFailed, id, final.State, final.TasksDone, final.TasksTotal)
	}
	line, err := r.verify(ctx)
	if err != nil {
		return fmt.Errorf("job %d finished, but reading its result back failed: %w", id, err)
	}
	r.printf("%s\n", line)
	return nil
}

// watcher turns Wait's progress callbacks into a live status line on a terminal, or into a
// log of task state changes elsewhere. The log is a timeline in catalog time: a task that
// starts and ends between two callbacks still gets both lines, and lines are held back
// briefly so that one discovered late is not printed after a later one.
type watcher struct {
	r        *runner
	client   *engine.Client
	id       int64
	since    time.Time // local time of the submission, anchoring catalog times to ours
	workers  map[int64]string
	printed  map[string]bool
	width    int // of the task name column
	pending  []event
	lastTime time.Duration
}

type event struct {
	at   time.Duration // since the job was created, in catalog time
	text string
}

// holdBack is how long a state change may go unnoticed: Wait's callback interval plus slack.
const holdBack = 500 * time.Millisecond

func (w *watcher) update(ctx context.Context, j catalog.Job) {
	d, err := w.client.Job(ctx, j.ID)
	if err != nil {
		return
	}
	if w.r.status.Terminal() {
		var running []string
		for _, t := range d.Tasks {
			if t.State == catalog.TaskRunning || t.State == catalog.TaskCancelling {
				running = append(running, t.Name)
			}
		}
		line := fmt.Sprintf("job %d %s %s %s", d.ID, d.State, w.r.bar(d.TasksDone, d.TasksTotal, 20), since(w.since))
		if len(running) > 0 {
			line += "  running: " + strings.Join(running, " ")
		}
		w.r.status.Update(truncate(line, 78))
		return
	}
	w.collect(d)
	horizon := time.Since(w.since) - holdBack
	if catalog.JobTerminal(d.State) {
		horizon = 1<<63 - 1
	}
	w.print(horizon)
}

// flush prints every event still held back.
func (w *watcher) flush() { w.print(1<<63 - 1) }

// print prints, in time order, the held-back events that happened up to horizon.
func (w *watcher) print(horizon time.Duration) {
	slices.SortStableFunc(w.pending, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	n := 0
	for n < len(w.pending) && w.pending[n].at <= horizon {
		e := w.pending[n]
		// Catalog and local clocks may disagree a little; never print time going backwards.
		w.lastTime = max(w.lastTime, e.at)
		w.r.printf("%8s  %s\n", roundDuration(w.lastTime), e.text)
		n++
	}
	w.pending = w.pending[n:]
}

// collect queues the events of d not seen before.
func (w *watcher) collect(d *engine.JobDetail) {
	add := func(key string, at time.Time, format string, args ...any) {
		if w.printed[key] {
			return
		}
		w.printed[key] = true
		w.pending = append(w.pending, event{at: at.Sub(d.CreatedAt), text: fmt.Sprintf(format, args...)})
	}
	for _, a := range d.Attempts {
		name := fmt.Sprintf("%-*s", w.width, a.TaskName)
		key := fmt.Sprintf("%d/%d", a.TaskID, a.Token)
		worker := "-"
		if a.WorkerID != nil {
			worker = workerName(w.workers, *a.WorkerID)
		}
		nth := ""
		if a.Attempt > 1 {
			nth = fmt.Sprintf(" (attempt %d)", a.Attempt)
		}
		add("start "+key, a.StartedAt, "%s running on %s%s", name, worker, nth)
		if a.FinishedAt == nil {
			continue
		}
		msg := ""
		if a.Message != nil {
			msg = ": " + oneLine(errors.New(*a.Message))
			if a.SQLState != nil {
				msg = ": " + *a.SQLState + " " + msg[2:]
			}
		}
		switch a.Outcome {
		case catalog.OutcomeDone:
			add("end "+key, *a.FinishedAt, "%s done in %s", name, roundDuration(a.FinishedAt.Sub(a.StartedAt)))
		case catalog.OutcomeRetry:
			add("end "+key, *a.FinishedAt, "%s failed, will retry%s", name, msg)
		default:
			add("end "+key, *a.FinishedAt, "%s %s%s", name, a.Outcome, msg)
		}
	}
	for _, t := range d.Tasks {
		if (t.State == catalog.TaskUnscheduled || t.State == catalog.TaskCancelled) && t.FinishedAt != nil {
			why := ""
			if t.State == catalog.TaskUnscheduled {
				why = ": a task it depends on failed"
			}
			add("final "+strconv.FormatInt(t.ID, 10), *t.FinishedAt, "%-*s %s%s", w.width, t.Name, t.State, why)
		}
	}
}

func workerName(names map[int64]string, id int64) string {
	if n, ok := names[id]; ok {
		return n
	}
	return "worker " + strconv.FormatInt(id, 10)
}

// printSummary prints one row per task and the failures, if any.
func (r *runner) printSummary(d *engine.JobDetail, names map[int64]string) {
	lastWorker := map[int64]int64{}
	for _, a := range d.Attempts {
		if a.WorkerID != nil {
			lastWorker[a.TaskID] = *a.WorkerID
		}
	}
	r.printf("\n")
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TASK\tNODE\tOWNER\tSTATE\tATTEMPTS\tWORKER\tDURATION")
	perWorker := map[string]int{}
	for _, t := range d.Tasks {
		node, worker := "-", "-"
		if t.Node != nil {
			node = *t.Node
		}
		if id, ok := lastWorker[t.ID]; ok {
			worker = workerName(names, id)
			if t.State == catalog.TaskDone {
				perWorker[worker]++
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.Name, node, t.Owner, t.State, t.Attempts, worker, taskDuration(t))
	}
	tw.Flush() //nolint:errcheck
	var failures []string
	for _, a := range d.Attempts {
		if a.Message != nil {
			code := ""
			if a.SQLState != nil {
				code = *a.SQLState + " "
			}
			failures = append(failures, fmt.Sprintf("  %s attempt %d %s: %s%s", a.TaskName, a.Attempt, a.Outcome, code, oneLine(errors.New(*a.Message))))
		}
	}
	if len(failures) > 0 {
		r.printf("\nerrors:\n%s\n", strings.Join(failures, "\n"))
	}
	var shares []string
	for _, n := range slices.Sorted(maps.Keys(perWorker)) {
		shares = append(shares, fmt.Sprintf("%s %d", n, perWorker[n]))
	}
	r.printf("\n")
	if len(shares) > 0 {
		r.printf("tasks per worker: %s\n", strings.Join(shares, ", "))
	}
}

func countsText(j catalog.Job) string {
	s := fmt.Sprintf("%d/%d tasks done", j.TasksDone, j.TasksTotal)
	for _, c := range []struct {
		n    int
		what string
	}{{j.TasksFailed, "failed"}, {j.TasksUnscheduled, "unscheduled"}, {j.TasksCancelled, "cancelled"}} {
		if c.n > 0 {
			s += fmt.Sprintf(", %d %s", c.n, c.what)
		}
	}
	return s
}

// verify reads the result back from every node, connected as the owner, and returns one line.
func (r *runner) verify(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var parts []string
	var report string
	for i, n := range r.nodes {
		cfg, err := pgx.ParseConfig(n.DSN)
		if err != nil {
			return "", fmt.Errorf("node %s: %w", n.Name, err)
		}
		cfg.User = r.opts.Owner
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return "", fmt.Errorf("connect to node %s as %s: %w", n.Name, r.opts.Owner, err)
		}
		var orders, customers int64
		var owner string
		var indexValid, analyzed bool
		err = conn.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM `+Schema+`.orders), (SELECT count(*) FROM `+Schema+`.customers),
				pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = '`+Schema+`.orders'::regclass)),
				coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('`+Schema+`.orders_customer_id_idx')), false),
				EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = '`+Schema+`' AND tablename = 'orders')`).
			Scan(&orders, &customers, &owner, &indexValid, &analyzed)
		if err == nil && i == 0 {
			var rows int64
			var top *string
			err = conn.QueryRow(ctx, `SELECT count(*), (SELECT name || ' with ' || revenue FROM `+Schema+`.top_customers
				ORDER BY revenue DESC, id LIMIT 1) FROM `+Schema+`.top_customers`).Scan(&rows, &top)
			if err == nil {
				if rows == 0 || top == nil {
					err = errors.New("the report table is empty")
				} else {
					report = fmt.Sprintf("report on %s: %d rows, top %s", n.Name, rows, *top)
				}
			}
		}
		conn.Close(context.Background()) //nolint:errcheck
		if err != nil {
			return "", fmt.Errorf("node %s: %w", n.Name, err)
		}
		var problems []string
		if orders != int64(r.opts.Rows) {
			problems = append(problems, fmt.Sprintf("%d orders, want %d", orders, r.opts.Rows))
		}
		if customers != int64(r.opts.customers()) {
			problems = append(problems, fmt.Sprintf("%d customers, want %d", customers, r.opts.customers()))
		}
		if owner != r.opts.Owner {
			problems = append(problems, fmt.Sprintf("orders owned by %s, want %s", owner, r.opts.Owner))
		}
		if !indexValid {
			problems = append(problems, "index orders_customer_id_idx missing or invalid")
		}
		if !analyzed {
			problems = append(problems, "no statistics on orders")
		}
		if len(problems) > 0 {
			return "", fmt.Errorf("node %s: %s", n.Name, strings.Join(problems, "; "))
		}
		parts = append(parts, fmt.Sprintf("%s %s orders + %s customers", n.Name, thousands(int(orders)), thousands(int(customers))))
	}
	return fmt.Sprintf("verified: %s; indexes valid, analyzed, owned by %s; %s",
		strings.Join(parts, ", "), r.opts.Owner, report), nil
}

func taskDuration(t catalog.Task) string {
	if t.StartedAt == nil || t.FinishedAt == nil || t.FinishedAt.Before(*t.StartedAt) {
		return "-"
	}
	return roundDuration(t.FinishedAt.Sub(*t.StartedAt))
}

func jobDuration(j catalog.Job) string {
	if j.FinishedAt == nil {
		return "-"
	}
	return roundDuration(j.FinishedAt.Sub(j.CreatedAt))
}

func since(t time.Time) string { return roundDuration(time.Since(t)) }

// roundDuration keeps about three significant digits: 12ms, 345ms, 1.23s, 12.3s.
func roundDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// thousands formats n with comma separators: 200,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func truncate(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-1]) + "…"
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
