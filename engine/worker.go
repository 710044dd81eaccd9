package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/notifier"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// Reasons a running task's context is cancelled by the worker itself.
var (
	errJobCancelled = errors.New("job cancelled")
	errJobPaused    = errors.New("job paused")
	errShutdown     = errors.New("worker shutting down")
	errLeaseLost    = errors.New("worker lease lost")
)

// Worker claims runnable tasks from the catalog, runs them, and records their results.
// It also stands for leader election; the leader rescues tasks of dead workers and applies
// retention. Any number of workers may run against one catalog.
type Worker struct {
	cat   *catalog.Catalog
	cfg   Config
	log   *slog.Logger
	pools *nodeconn.Pools
	// progressPools hold the owner sessions that read the tasks' progress on the nodes.
	progressPools *nodeconn.Pools
	xacts         *xactBatcher
	exec          map[string]Executor // by task kind
	// notifier wakes the worker and its cleaner; ownNotifier when the worker made it and so
	// runs it while it runs.
	notifier    *notifier.Notifier
	ownNotifier bool

	id        atomic.Int64
	active    atomic.Int64 // task slots in use, including slots reserved for a claim in flight
	saturated atomic.Bool  // the last claim filled every slot it asked for: more work may wait

	// claimMu serializes claims (by the fetch loop and by the completer) with the start of a
	// shutdown, so that no task starts once stopping is set.
	claimMu  sync.Mutex
	stopping bool
	// claimUnsure is set when a claim failed in a way that may have committed all the same
	// (its answer was lost with the connection, or it timed out): the next claim first hands
	// back what the catalog says this worker holds but it never started. Guarded by claimMu.
	claimUnsure bool
	// strandedUnrecorded are failures of tasks of removed nodes (failStranded) that the
	// catalog did not record: the leader holds those tasks, never started, and its lease
	// stays fresh, so no rescue would settle them. Tried again at its next round.
	strandedUnrecorded []catalog.Result
	// strandedFrom is the node the leader's next look for them starts from (ClaimStranded
	// walks a bounded part of the nodes with work each round).
	strandedFrom string

	tasksCtx context.Context
	killed   chan struct{} // closed when the shutdown cancels the running tasks
	wake     chan struct{}
	notified chan struct{} // a notification says there may be work (listen); wakes within a budget
	results  chan catalog.Result
	// tasksEnded is closed once the worker stops claiming and every task has returned (so
	// every result has been sent); completerDone once the completer has stopped.
	tasksEnded    chan struct{}
	completerDone chan struct{}
	parked        sync.WaitGroup // results recorded apart, whose rows were held (recordEach)
	// held are the parked results by job (heldKey), while something records them: a job
	// whose rows were found held, whose next results are parked without being tried.
	heldMu sync.Mutex
	held   map[int64][]catalog.Result

	mu      sync.Mutex
	running map[int64]*runningTask
	// slots are this worker's shares of its nodes' slots, by node (handover.go).
	slots map[string]*nodeSlots
	// vacancies are the slots of ended tasks whose results are not in a batch yet, by attempt.
	vacancies map[attempt]*vacancy
	// outstanding are the attempts this worker holds whose results the catalog has not taken
	// yet: running, or ended with the result on its way.
	outstanding map[attempt]struct{}
	tasksWG     sync.WaitGroup

	leading atomic.Bool
	rescues rescues // the leader's rescues under way
}

type runningTask struct {
	token  int64
	cancel context.CancelCauseFunc
	task   *deckhandtype.ClaimedTask // for sampling its progress on the node
	began  time.Time                 // on Config.Clock: its progress is sampled once it has run an interval
}

// attempt names one attempt of a task: the task and the attempt's fencing token.
type attempt struct{ task, token int64 }

// NewWorker prepares a worker on the catalog handle of a Client opened for it (Client.Catalog:
// give a worker a client of its own, as its claims should not queue behind other callers);
// Run starts it.
func NewWorker(cat *catalog.Catalog, cfg Config) *Worker {
	cfg = cfg.withDefaults()
	if cfg.Clock != (systemClock{}) && cat.Now == nil {
		cat.Now = cfg.Clock.Now
	}
	w := &Worker{
		cat:   cat,
		cfg:   cfg,
		pools: nodeconn.NewPools(cfg.Concurrency),
		// Progress is read in sessions of its own, so that reading it never waits for a slot
		// that the tasks hold.
		progressPools: nodeconn.NewPools(2),
		notifier:      cfg.Notifier,
		wake:          make(chan struct{}, 1),
		notified:      make(chan struct{}, 1),
		results:       make(chan catalog.Result, 2*cfg.Concurrency),
		running:       map[int64]*runningTask{},
		slots:         map[string]*nodeSlots{},
		vacancies:     map[attempt]*vacancy{},
		held:          map[int64][]catalog.Result{},

		outstanding:   map[attempt]struct{}{},
		tasksEnded:    make(chan struct{}),
		completerDone: make(chan struct{}),
		killed:        make(chan struct{}),
	}
	w.log = slog.New(workerIDHandler{Handler: cfg.Logger.Handler(), id: &w.id}).With("worker", cfg.Name)
	if w.notifier == nil {
		w.notifier = notifier.New(cat.Pool.Config().ConnConfig, w.log)
		w.ownNotifier = true
	}
	w.xacts = newXactBatcher(cat, w.cfg, w.log)
	kinds := newRegistry(cfg.Features)
	deps := Deps{Catalog: cat, Nodes: w.pools, Cleaner: cleanup.New(cat, w.pools), Logger: w.log, xacts: w.xacts, killed: w.killed,
		Clock: cfg.Clock, Submissions: &Client{cat: cat, kinds: kinds}}
	w.exec = kinds.executors(deps)
	var services []Service
	if !cfg.NoCleaner {
		// Nothing may leak: wherever a worker leads, the cleaner runs.
		cl := cleanup.New(cat, w.pools)
		cl.Logger = w.log.With("service", "cleaner")
		cl.Notifier = w.notifier
		services = append(services, cl)
	}
	for _, f := range cfg.Features {
		if f.Services != nil {
			services = append(services, f.Services(deps)...)
		}
	}
	services = append(services, cfg.LeaderServices...)
	w.cfg.LeaderServices = append(services, w.retention(services))
	return w
}

// ID is the worker's id in deckhand.workers once Run has registered it.
func (w *Worker) ID() int64 { return w.id.Load() }

// Leading reports whether this worker currently holds the leader lease.
func (w *Worker) Leading() bool { return w.leading.Load() }

// Nudge makes the worker look for runnable tasks now.
func (w *Worker) Nudge() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run works until ctx is done, then shuts down within ShutdownGrace plus
// ShutdownRecordTimeout (see shutdown), whatever the catalog and the nodes do: it stops
// claiming, lets running tasks finish within the grace, cancels the rest (released without
// charging an attempt) and records what it can. It returns ErrNotRecorded when some results
// could not be recorded. While it runs, a catalog that goes away costs nothing but time:
// claims, heartbeats and result writes are retried with backoff until it is back.
func (w *Worker) Run(ctx context.Context) error {
	id, err := w.cat.RegisterWorker(ctx, w.cfg.Name, w.cfg.Concurrency, w.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	w.id.Store(id) // and so in every log line from now on (workerIDHandler)
	w.log.Debug("worker started", "concurrency", w.cfg.Concurrency)

	// Tasks run under their own context: stopping the worker must not kill them outright.
	tasksCtx, cancelTasks := context.WithCancelCause(context.Background())
	var killOnce sync.Once
	killTasks := func(cause error) {
		cancelTasks(cause)
		killOnce.Do(func() { close(w.killed) })
	}
	defer killTasks(errShutdown)
	w.tasksCtx = tasksCtx
	// Results are recorded under theirs: only the end of a shutdown gives up on them.
	recordCtx, stopRecording := context.WithCancelCause(context.Background())
	defer stopRecording(nil)
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	var bg sync.WaitGroup
	go w.completer(recordCtx)
	// Stopped with the completer, once every task has ended and its result is recorded.
	go w.xacts.run(recordCtx)
	loops := []func(context.Context){w.listen, w.heartbeat, w.lead, w.sampleProgress}
	if w.ownNotifier {
		loops = append(loops, w.notifier.Run)
	}
	for _, loop := range loops {
		bg.Add(1)
		go func() { defer bg.Done(); loop(bgCtx) }()
	}

	w.fetchLoop(ctx)
	return w.shutdown(killTasks, stopRecording, func() { stopBackground(); bg.Wait() })
}

// fetchLoop claims whenever woken, polled, notified, or retrying a failed claim, until ctx is
// done. While the catalog is away claims are retried with backoff rather than on every poll; a
// nudge (the notifier's resync once it is back, for one) retries at once.
func (w *Worker) fetchLoop(ctx context.Context) {
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	budget := notifier.NewBudget(wakeBurst, wakeEvery)
	failures := 0
	for {
		found, err := w.claimAvailable(ctx)
		if found {
			budget.Refill()
		}
		pollC := poll.C
		var retry <-chan time.Time
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			delay := catalogRetry.Delay(failures, w.cfg.Rand())
			w.log.Warn("claim failed; retrying", "err", catalog.ExplainReadOnly(err), "failures", failures, "in", delay)
			pollC, retry = nil, time.After(delay)
		case failures > 0:
			w.log.Info("claiming again", "after_failures", failures)
			failures = 0
		}
		if !w.awaitClaim(ctx, pollC, retry, budget) {
			return
		}
	}
}

// awaitClaim waits for the next reason to claim: a nudge, the poll, the retry of a failed
// claim, or a notification that the budget allows. A notification beyond the budget waits
// for its turn, and those that come meanwhile merge into it; any claim before then covers
// it. It returns false once ctx is done.
func (w *Worker) awaitClaim(ctx context.Context, pollC, retry <-chan time.Time, budget *notifier.Budget) bool {
	var later <-chan time.Time // the turn of a notification beyond the budget
	for {
		select {
		case <-ctx.Done():
			return false
		case <-w.wake:
			return true
		case <-pollC:
			return true
		case <-retry:
			return true
		case <-w.notified:
			if later != nil {
				continue
			}
			wait := budget.Take(w.cfg.Clock.Now())
			if wait == 0 {
				return true
			}
			later = time.After(wait)
		case <-later:
			budget.Spend(w.cfg.Clock.Now())
			return true
		}
	}
}

// claimAvailable claims until the worker is full or nothing is runnable, and reports whether
// it claimed anything.
func (w *Worker) claimAvailable(ctx context.Context) (found bool, err error) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
		claimed, full, err := w.claimWith(cctx, "fetch", func(limit int) ([]deckhandtype.ClaimedTask, error) {
			return w.cat.Claim(cctx, w.ID(), limit)
		})
		cancel()
		found = found || claimed > 0
		if err != nil || !full {
			return found, err
		}
	}
	return found, nil
}

// claimWith reserves free slots, claims into them with claim, and starts what it got. It
// reports how many tasks it claimed and whether they filled every slot it asked for (more work
// may be waiting). ctx bounds what it asks the catalog itself.
func (w *Worker) claimWith(ctx context.Context, via string, claim func(limit int) ([]deckhandtype.ClaimedTask, error)) (claimed int, full bool, err error) {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	limit := 0
	if !w.stopping {
		limit = w.reserve(w.cfg.FetchLimit)
	}
	if limit > 0 && w.claimUnsure {
		if err := w.releaseUnstarted(ctx); err != nil {
			w.active.Add(-int64(limit))
			return 0, false, err
		}
		w.claimUnsure = false
	}
	began := time.Now()
	tasks, err := claim(limit)
	w.active.Add(int64(len(tasks) - limit)) // give back what the claim did not use
	if limit > 0 {
		w.cfg.Metrics.ClaimLatency.WithLabelValues(via).Observe(time.Since(began).Seconds())
		w.cfg.Metrics.Claimed.Add(float64(len(tasks)))
	}
	if err != nil {
		// Whether the claim committed is unknown: its answer may be what was lost.
		w.claimUnsure = w.claimUnsure || limit > 0
		return 0, false, err
	}
	// Tasks claimed into free slots first: those claimed ahead wait for their slots.
	for i := range tasks {
		if !tasks[i].Queued {
			w.start(&tasks[i])
		}
	}
	for i := range tasks {
		if tasks[i].Queued {
			w.cfg.Metrics.ClaimedAhead.Inc()
			w.start(&tasks[i])
		}
	}
	full = limit > 0 && len(tasks) == limit
	w.saturated.Store(limit == 0 || full)
	return len(tasks), full, nil
}

// reserve takes up to n free task slots and returns how many it took.
func (w *Worker) reserve(n int) int {
	for {
		used := w.active.Load()
		take := min(int64(n), int64(w.cfg.Concurrency)-used)
		if take <= 0 {
			return 0
		}
		if w.active.CompareAndSwap(used, used+take) {
			return int(take)
		}
	}
}

// start runs a claimed task in its own goroutine; its slot was reserved by the claim. A task
// claimed ahead first waits for a slot on its node (handover.go).
func (w *Worker) start(t *deckhandtype.ClaimedTask) {
	ctx, cancel := context.WithCancelCause(w.tasksCtx)
	w.mu.Lock()
	w.running[t.ID] = &runningTask{token: t.Token, cancel: cancel, task: t, began: w.cfg.Clock.Now()}
	w.outstanding[attempt{t.ID, t.Token}] = struct{}{}
	waiting, noSlot := w.addSlotTask(t)
	w.mu.Unlock()
	w.tasksWG.Add(1)
	go func() {
		defer w.tasksWG.Done()
		var err error // for a task claimed ahead that never had a slot, what ended its wait
		switch {
		case noSlot:
			err = errNoSlot
		case waiting != nil:
			err = w.awaitSlot(ctx, waiting)
		}
		ran := err == nil
		began := time.Now()
		if ran {
			// statement_timeout on the node ends a slow statement with a proper error first;
			// this deadline only catches what the server cannot see, like a stalled network.
			runCtx, cancelTimeout := context.WithTimeout(ctx, t.Timeout()+5*time.Second)
			err = w.run(runCtx, t)
			cancelTimeout()
		}
		cause := context.Cause(ctx)
		cancel(nil)
		leaseLost := errors.Is(cause, errLeaseLost) // the leader owns the task now; our result would be fenced off
		// A commit whose outcome the node could not tell before the shutdown killed the task:
		// no result may say it failed (it would run again) nor that it succeeded. It stays
		// outstanding, named when the worker exits, for the leader's rescue to ask the node.
		unknown := errors.Is(err, errCommitUnknown)
		w.mu.Lock()
		delete(w.running, t.ID)
		if leaseLost {
			delete(w.outstanding, attempt{t.ID, t.Token})
		}
		var next *waitingTask
		if ran {
			next = w.releaseSlot(t, !leaseLost && !unknown)
		}
		w.mu.Unlock()
		if !leaseLost && !unknown {
			r := w.result(t, err, cause)
			if !ran && (r.Outcome == deckhandtype.OutcomeReleased || errors.Is(err, errNoSlot)) {
				r.Outcome = deckhandtype.OutcomeReleased
				r.Err = &deckhandtype.TaskError{Message: "released before it started: " + taskerr.Describe(err).String()}
			}
			if next != nil {
				r.HandedTo, r.HandedToken = next.task.ID, next.task.Token
				w.cfg.Metrics.HandedOver.Inc()
			}
			w.cfg.Metrics.TaskDuration.WithLabelValues(t.Kind, string(r.Outcome)).Observe(time.Since(began).Seconds())
			w.cfg.Metrics.Attempts.WithLabelValues(t.Kind, string(r.Outcome)).Inc()
			if r.Outcome == deckhandtype.OutcomeRetry {
				w.cfg.Metrics.Retries.WithLabelValues(t.Kind).Inc()
			}
			select {
			case w.results <- r:
			case <-w.completerDone:
				// A shutdown gave up recording: the attempt stays outstanding, and is named
				// among those the leader will rescue.
			}
		}
		if next != nil {
			// After the result that hands the slot over is on its way: the next task's own
			// result comes after it.
			close(next.turn)
		}
		w.active.Add(-1)
		if w.saturated.Load() {
			w.Nudge()
		}
	}()
}

// run dispatches t to the executor of its kind.
func (w *Worker) run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	ex, ok := w.exec[t.Kind]
	if !ok {
		return taskerr.Permanent(fmt.Errorf("no executor for task kind %q on this worker", t.Kind))
	}
	return ex.Run(ctx, t)
}
