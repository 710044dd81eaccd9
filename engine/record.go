package engine

import (
	"context"
	"errors"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// result classifies how an attempt ended.
func (w *Worker) result(t *deckhandtype.ClaimedTask, err, cause error) catalog.Result {
	r := catalog.Result{TaskID: t.ID, Token: t.Token, JobID: t.JobID, WorkerID: w.ID(), FinishedAt: w.injectedNow(),
		HasDependents: t.HasDependents}
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
		r.Err = &deckhandtype.TaskError{Message: "released: the worker shut down while the task ran" + releasedEffect(t)}
	case errors.Is(cause, errJobPaused):
		r.Outcome = deckhandtype.OutcomeReleased
		r.Err = &deckhandtype.TaskError{Message: "released: the job was paused while the task ran" + releasedEffect(t)}
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

// releasedEffect is what a released attempt's message adds about its effect: its statement
// was cancelled on the node, which rolls a transaction back but may leave some or all of what
// a task without one did.
func releasedEffect(t *deckhandtype.ClaimedTask) string {
	if t.InTransaction {
		return ""
	}
	return "; the task does not run in a transaction, so its effect is unknown: it may have taken effect in part or in full, and it runs again"
}

// completer records results in batches: whatever accumulated while the previous batch was
// being written goes in the next one, so a busy worker writes few large batches and an idle
// one writes each result at once. It stops once every task has ended and its result is
// recorded, or when ctx ends (a shutdown giving up).
func (w *Worker) completer(ctx context.Context) {
	defer close(w.completerDone)
	defer w.parked.Wait()
	stopSide := make(chan struct{})
	side := startSideCompleter(ctx, w, stopSide)
	defer side.wait()
	defer close(stopSide)
	for {
		var r catalog.Result
		select {
		case r = <-w.results:
		case <-w.tasksEnded:
			// Every task has returned, so every result is in the channel (or the side's).
			select {
			case r = <-w.results:
			default:
				return
			}
		case <-ctx.Done():
			return
		}
		batch := drainResults(w.results, append(make([]catalog.Result, 0, 64), r))
		w.sealVacancies(batch)
		side.open()
		ok := w.record(ctx, batch, true)
		side.close()
		if !ok {
			return
		}
	}
}

// record writes a batch, retrying with backoff until the catalog takes it: results are never
// dropped, however long the catalog is away, until ctx ends (a shutdown giving up). It
// reports whether the batch was recorded. With claim (the completer's own batches; the side
// completer's go without, sidecompleter.go) it claims work for the free slots in the same
// transaction: a dependent the batch releases starts at once, and the slots it frees on a node
// change hands in one catalog commit rather than two (with a node's max_tasks reached, that
// commit is what every next task there waits for).
func (w *Worker) record(ctx context.Context, batch []catalog.Result, claim bool) bool {
	// The results of a job whose rows are held wait with those already parked.
	if batch = w.parkHeld(ctx, batch); len(batch) == 0 {
		return true
	}
	for try := 1; ; try++ {
		err := w.recordOnce(ctx, batch, claim)
		if err == nil {
			w.recorded(batch)
			if try > 1 {
				w.log.Info("results recorded", "tasks", len(batch), "tries", try)
			}
			for _, r := range batch {
				if r.Outcome == deckhandtype.OutcomeRetry {
					time.AfterFunc(r.Backoff, w.Nudge)
				}
			}
			// The batch's own claim took what fitted; when it filled every slot it asked
			// for, more may be waiting: the fetch loop claims again. A batch recorded without
			// a claim leaves its slots to it too.
			if !claim || w.saturated.Load() {
				w.Nudge()
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if catalog.IsLockTimeout(err) {
			w.recordEach(ctx, batch)
			return true
		}
		delay := catalogRetry.Delay(try, w.cfg.Rand())
		w.log.Warn("could not record results; retrying", "tasks", len(batch), "err", err, "tries", try, "in", delay)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// recordEach records the results of a batch that met a row held locked one by one: a
// catalog role may keep the rows of a job it may act on locked for as long as it likes
// (deckhand.pause, cancel... in a statement or transaction that goes on), and only the
// results of that job may wait for them. A result that meets the lock again is parked with
// the others of its job (park), and the results of its job that follow are parked without
// being tried: each try waits rowLockWait, and one after the other, a job's many results
// would hold back everyone else's for as long as it has results.
func (w *Worker) recordEach(ctx context.Context, batch []catalog.Result) {
	for _, r := range batch {
		if w.isHeld(r) {
			w.park(ctx, r)
			continue
		}
		one := []catalog.Result{r}
		err := w.recordOnce(ctx, one, true)
		switch {
		case err == nil:
			w.recorded(one)
			if r.Outcome == deckhandtype.OutcomeRetry {
				time.AfterFunc(r.Backoff, w.Nudge)
			}
		case ctx.Err() != nil:
			return
		default:
			w.park(ctx, r)
		}
	}
	w.Nudge() // the claims of the results recorded alone may have left slots free
}

// heldKey groups parked results: by job, or by task when the job is not known.
func heldKey(r catalog.Result) int64 {
	if r.JobID != 0 {
		return r.JobID
	}
	return -r.TaskID
}

// isHeld reports whether results of r's job are parked: its rows were held a moment ago.
func (w *Worker) isHeld(r catalog.Result) bool {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	_, ok := w.held[heldKey(r)]
	return ok
}

// parkHeld parks the results of batch whose jobs have results parked, and returns the others.
func (w *Worker) parkHeld(ctx context.Context, batch []catalog.Result) []catalog.Result {
	w.heldMu.Lock()
	none := len(w.held) == 0
	w.heldMu.Unlock()
	if none {
		return batch
	}
	rest := batch[:0]
	for _, r := range batch {
		if w.isHeld(r) {
			w.park(ctx, r)
		} else {
			rest = append(rest, r)
		}
	}
	return rest
}

// park queues r with the parked results of its job, and starts recording them if nothing
// does yet: one goroutine, one statement and one catalog connection per held job, however
// many of its results wait.
func (w *Worker) park(ctx context.Context, r catalog.Result) {
	key := heldKey(r)
	w.heldMu.Lock()
	q, active := w.held[key]
	w.held[key] = append(q, r)
	w.heldMu.Unlock()
	if active {
		return
	}
	w.parked.Add(1)
	go func() {
		defer w.parked.Done()
		w.recordParked(ctx, key)
	}()
}

// recordParked records the parked results of one job, retrying with backoff until the catalog
// takes them or ctx ends, and those parked meanwhile after them. It claims nothing: the claims
// go on meanwhile, without waiting for the job's locks.
func (w *Worker) recordParked(ctx context.Context, key int64) {
	for try := 1; ; {
		w.heldMu.Lock()
		rs := w.held[key]
		if len(rs) == 0 {
			delete(w.held, key)
			w.heldMu.Unlock()
			return
		}
		w.held[key] = []catalog.Result{} // still held: results that come meanwhile queue here
		w.heldMu.Unlock()
		for {
			cctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
			_, err := w.cat.Complete(cctx, rs)
			cancel()
			if err == nil {
				w.recorded(rs)
				for _, r := range rs {
					if r.Outcome == deckhandtype.OutcomeRetry {
						time.AfterFunc(r.Backoff, w.Nudge)
					}
				}
				w.Nudge()
				try = 1
				break
			}
			delay := catalogRetry.Delay(try, w.cfg.Rand())
			if try == 1 || try%10 == 0 {
				w.log.Warn("could not record results; retrying", "task", rs[0].TaskID, "tasks", len(rs), "err", err, "tries", try, "in", delay)
			}
			try++
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}

// recordOnce makes one attempt at recording a batch and, with claim, claiming into the free
// slots, within CatalogTimeout.
func (w *Worker) recordOnce(ctx context.Context, batch []catalog.Result, claim bool) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
	defer cancel()
	if !claim {
		_, err := w.cat.Complete(ctx, batch)
		return err
	}
	_, _, err := w.claimWith(ctx, "complete", func(limit int) ([]deckhandtype.ClaimedTask, error) {
		_, claimed, err := w.cat.CompleteAndClaimAhead(ctx, batch, w.ID(), limit, w.aheadWanted())
		return claimed, err
	})
	return err
}

// injectedNow is the test clock's time, or zero to let the catalog use its own clock.
func (w *Worker) injectedNow() time.Time {
	if w.cat.Now == nil {
		return time.Time{}
	}
	return w.cat.Now()
}
