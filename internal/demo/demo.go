// Package demo runs `deckhand demo`: one real job end to end on this machine. Without a
// catalog it starts a throwaway PostgreSQL cluster holding the catalog and two target
// databases; with one it uses the nodes already registered there. Either way it submits a
// DAG job through engine.Client, runs it with two in-process workers, shows progress, prints
// a summary, reads the result back from the nodes, and leaves nothing running.
//
// The job is job.yaml, a job spec like a user's (job.go fills in its values). Run, here, drives
// the demo with the help of cluster.go (the throwaway cluster, the catalog's nodes), workers.go
// and verify.go (reading the result back); what it shows is in progress.go (the live line or
// the log of task state changes) and render.go (the job's picture, the summary table, the
// verification line).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
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

	customersPerRow = 10 // one customer per this many orders
)

// DefaultNodes are the nodes the demo creates, or expects in a configured catalog.
var DefaultNodes = []string{"eu", "us"}

// ErrJobFailed is returned (wrapped) when the demo job ends failed or cancelled.
var ErrJobFailed = errors.New("demo job failed")

// ErrInterrupted is returned (wrapped) when ctx ends before the demo does (Ctrl-C).
var ErrInterrupted = errors.New("demo interrupted")

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
	nodes      []deckhandtype.Node // in opts.Nodes order
	jobTime    string
}

// runJob submits the job, waits for it with live progress, prints the summary and verifies
// the result on the nodes.
func (r *runner) runJob(ctx context.Context, client *engine.Client, ws *workers, job *spec.Job) error {
	submitter, err := client.Submitter(ctx)
	if err != nil {
		return err
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
	final, err := client.Wait(wctx, id, func(j deckhandtype.Job) { watch.update(wctx, j) })
	if err != nil {
		if cause := context.Cause(wctx); cause != nil {
			err = cause
		}
		reason := spec.OneLine(err.Error())
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
	if final.State != deckhandtype.JobFinished {
		return fmt.Errorf("%w: job %d %s (%d of %d tasks done); see the errors above", ErrJobFailed, id, final.State, final.TasksDone, final.TasksTotal)
	}
	res, err := r.verify(ctx)
	if err != nil {
		return fmt.Errorf("job %d finished, but reading its result back failed: %w", id, err)
	}
	r.printVerified(res)
	return nil
}
