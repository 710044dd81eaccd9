package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
)

// Executor runs one attempt of a task of its kind. It must return promptly once ctx is done.
// Its error decides what becomes of the task: nil is done; an error wrapped by Permanent fails
// the task at once; one wrapped by Superseded cancels it; others are classified (connection
// loss, serialization failures, lock timeouts... retry; syntax, permission, data errors fail).
type Executor interface {
	Run(ctx context.Context, t *deckhandtype.ClaimedTask) error
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, t *deckhandtype.ClaimedTask) error

// Run calls f.
func (f ExecutorFunc) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error { return f(ctx, t) }

// Permanent marks err as one that retrying cannot fix: the task fails at once.
func Permanent(err error) error { return taskerr.Permanent(err) }

// Superseded marks err as work no longer wanted (something newer replaced it): the task ends
// cancelled, neither retried nor failing its job.
func Superseded(err error) error { return taskerr.Superseded(err) }

// Kind is a task kind: how a submission of it is checked and what runs it.
type Kind struct {
	Name      string
	NeedsNode bool // a task of the kind names the node it runs on
	// Validate checks a task's payload at submission, without a database, so that a payload
	// the executor would refuse is refused before anything is written; nil: no payload.
	Validate spec.PayloadValidator
	// Check, when set, checks the job's tasks of the kind at submission against the catalog
	// and the nodes, after Validate and the owner checks of the nodes tasks name: what a
	// payload alone cannot tell (that the node groups it names exist, that the submitter may
	// act as the owner on nodes the task does not name, ...). Submit, and Prepare for a
	// schedule, refuse the job with its error; tasks come in job order, each with its owner
	// filled in. The executor checks again when it runs: what is true at submission may not
	// be by then.
	Check func(ctx context.Context, c *Client, submitter string, tasks []spec.Task) error
	// Internal kinds are created by deckhand itself (an export's coordinator and parts) and
	// are never submitted; the catalog refuses them from submitters too.
	Internal bool
	// New builds the kind's executor for a worker.
	New func(Deps) Executor
}

// Feature is what a feature package hands the engine: the task kinds it adds and the services
// that run on the leader for it. Programs assemble the features they ship and give them to
// Open (to check submissions) and to NewWorker (to run them); the engine itself knows only
// sql and noop.
type Feature struct {
	Name     string
	Kinds    []Kind
	Services func(Deps) []Service // nil: none
}

// Deps is what a worker lends the executors and services its features build.
type Deps struct {
	Catalog *catalog.Catalog
	Nodes   *nodeconn.Pools  // sessions on nodes as a task's owner
	Cleaner *cleanup.Cleaner // registers what an operation creates, pins what it uses
	Logger  *slog.Logger
	Clock   Clock // the worker's Config.Clock
	// Submissions checks jobs as Client.Submit does, with the worker's kinds, for a submitter
	// other than the catalog session's (Client.Prepare): a schedule's firing. It shares the
	// worker's catalog handle; do not close it.
	Submissions *Client

	xacts xactRecorder // the worker's: records node transaction ids before they commit
	// killed is closed when the worker's shutdown cancels its running tasks (after the grace).
	killed <-chan struct{}
}

// registry holds the kinds of a Client or a Worker, sql and noop included, by name.
type registry map[string]Kind

// builtinKinds are the kinds the engine runs itself.
var builtinKinds = []Kind{
	{Name: spec.KindSQL, NeedsNode: true, New: func(d Deps) Executor {
		return sqlExecutor{pools: d.Nodes, xacts: d.xacts, killed: d.killed, nodes: d.Catalog}
	}},
	{Name: spec.KindNoop, New: func(Deps) Executor {
		return ExecutorFunc(func(context.Context, *deckhandtype.ClaimedTask) error { return nil })
	}},
}

// newRegistry collects the kinds of features; a name given twice is a programming error.
func newRegistry(features []Feature) registry {
	r := registry{}
	add := func(k Kind) {
		if _, dup := r[k.Name]; dup {
			panic(fmt.Sprintf("engine: task kind %q is registered twice", k.Name))
		}
		r[k.Name] = k
	}
	for _, k := range builtinKinds {
		add(k)
	}
	for _, f := range features {
		for _, k := range f.Kinds {
			add(k)
		}
	}
	return r
}

// check runs the Check of each kind the job's tasks have, once per kind, in the order the
// kinds first appear; owners are filled in with submitter.
func (r registry) check(ctx context.Context, c *Client, submitter string, tasks []spec.Task) error {
	byKind := map[string][]spec.Task{}
	var order []string
	for _, t := range tasks {
		if r[t.Kind].Check == nil {
			continue
		}
		if t.Owner == "" {
			t.Owner = submitter
		}
		if _, seen := byKind[t.Kind]; !seen {
			order = append(order, t.Kind)
		}
		byKind[t.Kind] = append(byKind[t.Kind], t)
	}
	for _, kind := range order {
		if err := r[kind].Check(ctx, c, submitter, byKind[kind]); err != nil {
			return err
		}
	}
	return nil
}

// SubmittableKinds are the kinds a client with these features accepts in a submission: what
// spec.Job.Validate is given to check a job before it reaches the catalog.
func SubmittableKinds(features ...Feature) spec.Kinds { return newRegistry(features).submittable() }

// submittable is what spec.Validate may accept: every kind but the internal ones.
func (r registry) submittable() spec.Kinds {
	out := spec.Kinds{}
	for name, k := range r {
		if !k.Internal {
			out[name] = spec.KindSpec{NeedsNode: k.NeedsNode, Validate: k.Validate}
		}
	}
	return out
}

// executors builds one executor per kind for a worker.
func (r registry) executors(d Deps) map[string]Executor {
	out := make(map[string]Executor, len(r))
	for name, k := range r {
		out[name] = k.New(d)
	}
	return out
}
