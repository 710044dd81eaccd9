package engine

import (
	"context"
	"errors"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// heartbeat renews the worker's lease every HeartbeatInterval. A heartbeat that fails (the
// catalog is restarting, failing over, unreachable) is retried within a second, so the lease
// is renewed the moment the catalog is back; the worker itself never gives up its tasks for
// it. Only the catalog decides the worker is dead: if the lease ran out meanwhile and the
// leader rescued the tasks, the next heartbeat says so (ErrLeaseLost) and the tokens fence
// off whatever the worker still reports.
func (w *Worker) heartbeat(ctx context.Context) {
	retryMax := min(time.Second, w.cfg.HeartbeatInterval)
	next := time.NewTimer(w.cfg.HeartbeatInterval)
	defer next.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		}
		hctx, cancel := context.WithTimeout(ctx, min(w.cfg.CatalogTimeout, w.cfg.HeartbeatInterval))
		stops, err := w.cat.Heartbeat(hctx, w.ID(), w.cfg.LeaseTTL)
		cancel()
		wait := w.cfg.HeartbeatInterval
		switch {
		case errors.Is(err, catalog.ErrLeaseLost):
			failures = 0
			w.loseLease(ctx)
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = min(catalogRetry.Delay(failures, w.cfg.Rand()), retryMax)
			w.log.Warn("heartbeat failed; retrying", "err", catalog.ExplainReadOnly(err), "failures", failures, "in", wait)
		default:
			if failures > 0 {
				w.log.Info("heartbeat recorded again", "after_failures", failures)
				failures = 0
			}
			w.stop(stops)
		}
		next.Reset(wait)
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
	rctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
	defer cancel()
	id, err := w.cat.RegisterWorker(rctx, w.cfg.Name, w.cfg.Concurrency, w.cfg.LeaseTTL)
	if err != nil {
		w.log.Error("could not re-register worker", "err", err)
		return
	}
	w.id.Store(id)
	w.Nudge()
}
