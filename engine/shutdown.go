package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// ErrNotRecorded is returned by Worker.Run when its shutdown could not record the results of
// some attempts within ShutdownRecordTimeout (the catalog was unreachable, or tasks did not
// return once cancelled). Nothing is lost: the leader re-runs those tasks once the worker's
// lease expires, terminating their backends on the nodes first.
var ErrNotRecorded = errors.New("results not recorded")

var errRecordTimeout = errors.New("shutdown record timeout")

// closeTimeout bounds the last steps of a shutdown, after the results: the worker's loops
// returning, its stop being recorded, its node connections closing.
const closeTimeout = 2 * time.Second

// shutdown stops the worker once Run's context has ended, within ShutdownGrace plus
// ShutdownRecordTimeout plus a few seconds, whatever the catalog and the nodes do:
//
//  1. no more claims;
//  2. running tasks get ShutdownGrace to finish; then they are cancelled (released without
//     charging an attempt);
//  3. results are recorded for at most ShutdownRecordTimeout: waiting for cancelled tasks to
//     return, and retrying the catalog;
//  4. the background loops stop; tasks claimed by a claim whose answer was lost are released
//     and the worker's stop is recorded; node connections close: each for at most
//     closeTimeout.
//
// Attempts whose results are still not recorded are named in one log line and the error
// wraps ErrNotRecorded.
func (w *Worker) shutdown(killTasks, stopRecording context.CancelCauseFunc, stopBackground func()) error {
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	w.log.Info("shutting down: no more claims; running tasks may finish", "tasks", w.active.Load(), "grace", w.cfg.ShutdownGrace)
	// A claim in flight holds claimMu for at most CatalogTimeout.
	w.claimMu.Lock()
	w.stopping = true
	w.claimMu.Unlock()
	w.releaseWaiting()
	go func() { w.tasksWG.Wait(); close(w.tasksEnded) }()
	select {
	case <-w.tasksEnded:
	case <-grace.C:
		w.log.Info("shutdown grace expired; cancelling running tasks", "tasks", w.active.Load())
		killTasks(errShutdown)
	}
	// The completer ends when every task has returned and its result is recorded, or when
	// this timer gives up on it.
	giveUp := time.AfterFunc(w.cfg.ShutdownRecordTimeout, func() { stopRecording(errRecordTimeout) })
	<-w.completerDone
	giveUp.Stop()

	if !within(closeTimeout, stopBackground) {
		w.log.Warn("background loops did not stop in time; leaving them")
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// No claim is in flight any more; one whose answer was lost is handed back uncharged,
	// rather than rescued as lost once the worker's stop is recorded.
	w.claimMu.Lock()
	if w.claimUnsure {
		if err := w.releaseUnstarted(stopCtx); err != nil {
			w.log.Warn("could not release tasks claimed by a claim whose answer was lost", "err", err)
		}
	}
	w.claimMu.Unlock()
	if err := w.cat.StopWorker(stopCtx, w.ID()); err != nil {
		w.log.Warn("could not record the worker's stop; the leader will find its lease expired", "err", err)
	}
	if !within(closeTimeout, func() { w.pools.Close(); w.progressPools.Close() }) {
		w.log.Warn("node connections did not close in time; leaving them")
	}
	if left := w.unrecorded(); len(left) > 0 {
		w.log.Error("shutdown: results not recorded; the leader will re-run these attempts' tasks once this worker's lease expires",
			"attempts", strings.Join(left, ", "))
		return fmt.Errorf("%w for %s; the leader re-runs them once worker %d's lease expires",
			ErrNotRecorded, strings.Join(left, ", "), w.ID())
	}
	w.log.Debug("worker stopped")
	return nil
}

// within runs f and waits at most d for it to return, reporting whether it did.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// recorded forgets the attempts of a batch the catalog has taken (applied or fenced off).
func (w *Worker) recorded(batch []catalog.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		delete(w.outstanding, attempt{r.TaskID, r.Token})
	}
}

// unrecorded lists the outstanding attempts as "task ID/token TOKEN", by task.
func (w *Worker) unrecorded() []string {
	w.mu.Lock()
	as := make([]attempt, 0, len(w.outstanding))
	for a := range w.outstanding {
		as = append(as, a)
	}
	w.mu.Unlock()
	slices.SortFunc(as, func(a, b attempt) int { return cmp.Compare(a.task, b.task) })
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = fmt.Sprintf("task %d/token %d", a.task, a.token)
	}
	return out
}

// releaseUnstarted hands back the attempts the catalog says this worker holds but that it
// never started: a claim whose answer was lost (the catalog restarted under it, or it timed
// out) may have committed all the same, and its tasks would otherwise stay running for as
// long as the worker heartbeats. It runs under claimMu, so no claim is in flight; an attempt
// that ends meanwhile is fenced off by its token.
func (w *Worker) releaseUnstarted(ctx context.Context) error {
	held, err := w.cat.HeldAttempts(ctx, w.ID())
	if err != nil {
		return err
	}
	var results []catalog.Result
	w.mu.Lock()
	for _, a := range held {
		if _, ok := w.outstanding[attempt{a.TaskID, a.Token}]; !ok {
			results = append(results, catalog.Result{
				TaskID: a.TaskID, Token: a.Token, WorkerID: w.ID(), Outcome: deckhandtype.OutcomeReleased,
				FinishedAt: w.injectedNow(),
				Err:        &deckhandtype.TaskError{Message: "released: never started, as the answer to its claim was lost"},
			})
		}
	}
	w.mu.Unlock()
	if len(results) == 0 {
		return nil
	}
	comp, err := w.cat.Complete(ctx, results)
	if err != nil {
		return err
	}
	w.log.Warn("released tasks whose claim committed but whose answer was lost", "tasks", comp.Applied)
	return nil
}
