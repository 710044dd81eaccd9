package engine

import (
	"context"
	"strconv"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

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

// cancelMarked stops the worker's tasks that the catalog marks cancelling, or whose job was
// paused at once.
func (w *Worker) cancelMarked(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
	defer cancel()
	stops, err := w.cat.StoppingTasks(ctx, w.ID())
	if err != nil {
		w.log.Warn("could not read cancelled tasks", "err", err)
		return
	}
	w.stop(stops)
}

// stop cancels the tasks that must stop, each with the cause its result will tell.
func (w *Worker) stop(stops catalog.Stops) {
	w.cancelTasks(stops.Cancel, errJobCancelled)
	w.cancelTasks(stops.Release, errJobPaused)
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
