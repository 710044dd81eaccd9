package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
	xacts *xactBatcher
	exec  map[string]Executor // by task kind
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
	tasksCtx context.Context
	wake     chan struct{}
	results  chan finished

	mu      sync.Mutex
	running map[int64]*runningTask
	tasksWG sync.WaitGroup

	leading atomic.Bool
}

// finished is an attempt's result on its way to the catalog.
type finished struct {
	catalog.Result
	releases bool // the task has dependents that its success may release
}

type runningTask struct {
	token  int64
	cancel context.CancelCauseFunc
}

// NewWorker prepares a worker; Run starts it.
func NewWorker(cat *catalog.Catalog, cfg Config) *Worker {
	cfg = cfg.withDefaults()
	if cfg.Clock != (systemClock{}) && cat.Now == nil {
		cat.Now = cfg.Clock.Now
	}
	w := &Worker{
		cat:      cat,
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.Name),
		pools:    nodeconn.NewPools(cfg.Concurrency),
		notifier: cfg.Notifier,
		wake:     make(chan struct{}, 1),
		results:  make(chan finished, 2*cfg.Concurrency),
		running:  map[int64]*runningTask{},
	}
	if w.notifier == nil {
		w.notifier = notifier.New(cat.Pool.Config().ConnConfig, w.log)
		w.ownNotifier = true
	}
	w.xacts = newXactBatcher(cat)
	deps := Deps{Catalog: cat, Nodes: w.pools, Cleaner: cleanup.New(cat, w.pools), Logger: w.log, xacts: w.xacts}
	kinds := newRegistry(cfg.Features)
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

// Run works until ctx is done, then shuts down gracefully: it stops claiming, lets running
// tasks finish within ShutdownGrace, releases the rest without charging an attempt, and
// records every result before it returns.
func (w *Worker) Run(ctx context.Context) error {
	id, err := w.cat.RegisterWorker(ctx, w.cfg.Name, w.cfg.Concurrency, w.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	w.id.Store(id)
	w.log = w.log.With("worker_id", id)
	w.log.Debug("worker started", "concurrency", w.cfg.Concurrency)
	defer w.pools.Close()

	// Tasks run under their own context: stopping the worker must not kill them outright.
	tasksCtx, killTasks := context.WithCancelCause(context.Background())
	defer killTasks(errShutdown)
	w.tasksCtx = tasksCtx
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	completerDone := make(chan struct{})
	go func() { defer close(completerDone); w.completer(bgCtx) }()
	// Stopped with the background loops, after every task has ended.
	go w.xacts.run(bgCtx)
	loops := []func(context.Context){w.listen, w.heartbeat, w.lead}
	if w.ownNotifier {
		loops = append(loops, w.notifier.Run)
	}
	for _, loop := range loops {
		bg.Add(1)
		go func() { defer bg.Done(); loop(bgCtx) }()
	}

	w.fetchLoop(ctx)

	// Graceful shutdown: no claim from here on, by the fetch loop or the completer.
	w.claimMu.Lock()
	w.stopping = true
	w.claimMu.Unlock()
	finished := make(chan struct{})
	go func() { w.tasksWG.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Info("shutdown grace expired; releasing running tasks", "tasks", w.active.Load())
		killTasks(errShutdown)
		<-finished
	}
	close(w.results) // every task goroutine has sent its result
	<-completerDone
	stopBackground()
	bg.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.cat.StopWorker(stopCtx, w.ID()); err != nil {
		w.log.Warn("could not record worker stop", "err", err)
	}
	w.log.Debug("worker stopped")
	return nil
}

func (w *Worker) fetchLoop(ctx context.Context) {
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	for {
		w.claimAvailable(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-poll.C:
		}
	}
}

// claimAvailable claims until the worker is full or nothing is runnable.
func (w *Worker) claimAvailable(ctx context.Context) {
	for ctx.Err() == nil {
		full, err := w.claimWith("fetch", func(limit int) ([]deckhandtype.ClaimedTask, error) {
			return w.cat.Claim(ctx, w.ID(), limit)
		})
		if err != nil && ctx.Err() == nil {
			w.log.Warn("claim failed; retrying on the next poll", "err", err)
		}
		if !full {
			return
		}
	}
}

// claimWith reserves free slots, claims into them with claim, and starts what it got. It
// reports whether the claim filled every slot it asked for (more work may be waiting).
func (w *Worker) claimWith(via string, claim func(limit int) ([]deckhandtype.ClaimedTask, error)) (full bool, err error) {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	limit := 0
	if !w.stopping {
		limit = w.reserve(w.cfg.FetchLimit)
	}
	began := time.Now()
	tasks, err := claim(limit)
	w.active.Add(int64(len(tasks) - limit)) // give back what the claim did not use
	if limit > 0 {
		w.cfg.Metrics.ClaimLatency.WithLabelValues(via).Observe(time.Since(began).Seconds())
		w.cfg.Metrics.Claimed.Add(float64(len(tasks)))
	}
	if err != nil {
		return false, err
	}
	for i := range tasks {
		w.start(&tasks[i])
	}
	full = limit > 0 && len(tasks) == limit
	w.saturated.Store(limit == 0 || full)
	return full, nil
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

// start runs a claimed task in its own goroutine; its slot was reserved by the claim.
func (w *Worker) start(t *deckhandtype.ClaimedTask) {
	ctx, cancel := context.WithCancelCause(w.tasksCtx)
	// statement_timeout on the node ends a slow statement with a proper error first;
	// this deadline only catches what the server cannot see, like a stalled network.
	ctx, cancelTimeout := context.WithTimeout(ctx, t.Timeout()+5*time.Second)
	w.mu.Lock()
	w.running[t.ID] = &runningTask{token: t.Token, cancel: cancel}
	w.mu.Unlock()
	w.tasksWG.Add(1)
	go func() {
		defer w.tasksWG.Done()
		began := time.Now()
		err := w.run(ctx, t)
		cause := context.Cause(ctx)
		cancelTimeout()
		cancel(nil)
		w.mu.Lock()
		delete(w.running, t.ID)
		w.mu.Unlock()
		if !errors.Is(cause, errLeaseLost) { // else the leader owns the task now; our result would be fenced off
			r := w.result(t, err, cause)
			w.cfg.Metrics.TaskDuration.WithLabelValues(t.Kind, string(r.Outcome)).Observe(time.Since(began).Seconds())
			w.cfg.Metrics.Attempts.WithLabelValues(t.Kind, string(r.Outcome)).Inc()
			if r.Outcome == deckhandtype.OutcomeRetry {
				w.cfg.Metrics.Retries.WithLabelValues(t.Kind).Inc()
			}
			w.results <- finished{r, t.HasDependents}
		}
		w.active.Add(-1)
		if w.saturated.Load() {
			w.Nudge()
		}
	}()
}

// result classifies how an attempt ended.
func (w *Worker) result(t *deckhandtype.ClaimedTask, err, cause error) catalog.Result {
	r := catalog.Result{TaskID: t.ID, Token: t.Token, WorkerID: w.ID(), FinishedAt: w.injectedNow()}
	switch {
	case err == nil:
		r.Outcome = deckhandtype.OutcomeDone
	case errors.Is(cause, errJobCancelled):
		r.Outcome = deckhandtype.OutcomeCancelled
		r.Err = &deckhandtype.TaskError{Message: "cancelled: " + taskerr.Describe(err).String()}
	case taskerr.IsSuperseded(err):
		r.Outcome = deckhandtype.OutcomeCancelled
		r.Err = taskerr.Describe(err)
	case errors.Is(cause, errShutdown):
		r.Outcome = deckhandtype.OutcomeReleased
		r.Err = &deckhandtype.TaskError{Message: "released: the worker shut down while the task ran"}
	case taskerr.Retryable(err):
		r.Outcome = deckhandtype.OutcomeRetry
		r.Err = taskerr.Describe(err)
		r.Backoff = w.cfg.Backoff.Delay(t.Attempts, w.cfg.Rand())
	default:
		r.Outcome = deckhandtype.OutcomeFailed
		r.Err = taskerr.Describe(err)
	}
	return r
}

// completer records results in batches: whatever accumulated while the previous batch was
// being written goes in the next one, so a busy worker writes few large batches and an idle
// one writes each result at once.
func (w *Worker) completer(ctx context.Context) {
	const maxBatch = 2000
	batch := make([]catalog.Result, 0, maxBatch)
	for f := range w.results {
		batch = append(batch[:0], f.Result)
		releases := f.releases
	drain:
		for len(batch) < maxBatch {
			select {
			case f, ok := <-w.results:
				if !ok {
					break drain
				}
				batch = append(batch, f.Result)
				releases = releases || f.releases
			default:
				break drain
			}
		}
		w.record(ctx, batch, releases)
	}
}

// record writes a batch, retrying until the catalog takes it: results are never dropped.
// When the batch may release dependents, it claims work for the free slots in the same
// transaction, so a released dependent starts at once.
func (w *Worker) record(ctx context.Context, batch []catalog.Result, releases bool) {
	ctx = context.WithoutCancel(ctx)
	for try := 0; ; try++ {
		var comp catalog.Completion
		var err error
		if releases {
			_, err = w.claimWith("complete", func(limit int) ([]deckhandtype.ClaimedTask, error) {
				var claimed []deckhandtype.ClaimedTask
				var err error
				comp, claimed, err = w.cat.CompleteAndClaim(ctx, batch, w.ID(), limit)
				return claimed, err
			})
		} else {
			comp, err = w.cat.Complete(ctx, batch)
		}
		if err == nil {
			for _, r := range batch {
				if r.Outcome == deckhandtype.OutcomeRetry {
					time.AfterFunc(r.Backoff, w.Nudge)
				}
			}
			// Slots freed by this batch, and dependents there was no slot for, are claimed
			// by the fetch loop.
			if !releases || (comp.Runnable > 0 && w.saturated.Load()) {
				w.Nudge()
			}
			return
		}
		delay := w.cfg.Backoff.Delay(try+1, w.cfg.Rand())
		w.log.Warn("could not record results; retrying", "tasks", len(batch), "err", err, "in", delay)
		time.Sleep(min(delay, 10*time.Second))
	}
}

// injectedNow is the test clock's time, or zero to let the catalog use its own clock.
func (w *Worker) injectedNow() time.Time {
	if w.cat.Now == nil {
		return time.Time{}
	}
	return w.cat.Now()
}

// listen wakes the worker on catalog notifications. Polling covers what the notifier misses
// while it reconnects; on resync (it listens again) the worker looks for work and for
// cancelled tasks at once rather than at the next poll.
func (w *Worker) listen(ctx context.Context) {
	// Reading is quick (a nudge, a look at the running tasks), so a small buffer only fills
	// when the worker is busy anyway; what it drops the poll and the heartbeat catch.
	sub := w.notifier.Subscribe(256, catalog.ChannelRunnable, catalog.ChannelCancel)
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Resync():
			w.Nudge()
			w.cancelMarked(ctx)
		case n := <-sub.C():
			switch n.Channel {
			case catalog.ChannelRunnable:
				// Our own completions nudge us directly; a second, empty claim would only
				// delay the next real one.
				if n.Payload != strconv.FormatInt(w.ID(), 10) {
					w.Nudge()
				}
			case catalog.ChannelCancel:
				// The payload names no job: anyone may listen. The catalog says which are ours.
				if w.runsAny() {
					w.cancelMarked(ctx)
				}
			}
		}
	}
}

func (w *Worker) runsAny() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running) > 0
}

// cancelMarked cancels the worker's tasks that the catalog marks cancelling.
func (w *Worker) cancelMarked(ctx context.Context) {
	ids, err := w.cat.CancellingTasks(ctx, w.ID())
	if err != nil {
		w.log.Warn("could not read cancelled tasks", "err", err)
		return
	}
	w.cancelTasks(ids, errJobCancelled)
}

func (w *Worker) cancelTasks(ids []int64, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if rt, ok := w.running[id]; ok {
			rt.cancel(cause)
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	tick := time.NewTicker(w.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cancelling, err := w.cat.Heartbeat(ctx, w.ID(), w.cfg.LeaseTTL)
		switch {
		case errors.Is(err, catalog.ErrLeaseLost):
			w.loseLease(ctx)
		case err != nil:
			if ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "err", err)
			}
		default:
			w.cancelTasks(cancelling, errJobCancelled)
		}
	}
}

// loseLease handles being declared dead (for example after a long pause): the leader may
// have handed our tasks to other workers, so we stop them all and start over as a new worker.
func (w *Worker) loseLease(ctx context.Context) {
	w.log.Error("worker lease lost; abandoning running tasks")
	w.mu.Lock()
	for _, rt := range w.running {
		rt.cancel(errLeaseLost)
	}
	w.mu.Unlock()
	id, err := w.cat.RegisterWorker(ctx, w.cfg.Name, w.cfg.Concurrency, w.cfg.LeaseTTL)
	if err != nil {
		w.log.Error("could not re-register worker", "err", err)
		return
	}
	w.id.Store(id)
	w.Nudge()
}

// run dispatches t to the executor of its kind.
func (w *Worker) run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	ex, ok := w.exec[t.Kind]
	if !ok {
		return taskerr.Permanent(fmt.Errorf("no executor for task kind %q on this worker", t.Kind))
	}
	return ex.Run(ctx, t)
}
