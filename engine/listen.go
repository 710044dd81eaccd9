package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/notifier"
)

// Notifications that turn out to be for nothing cost a worker at most wakeBurst catalog round
// trips at once, then one per wakeEvery (notifier.Budget): anyone who may connect to the
// catalog's database may send deckhand's notifications. The claims that find work, and the
// reads that find tasks to stop, fill the budget again.
const (
	wakeBurst = 4
	wakeEvery = 100 * time.Millisecond
)

// listen wakes the worker on catalog notifications. Polling covers what the notifier misses
// while it reconnects; on resync (it listens again) the worker looks for work and for
// cancelled tasks at once rather than at the next poll.
func (w *Worker) listen(ctx context.Context) {
	// Reading is quick (a nudge, a look at the running tasks), so a small buffer only fills
	// when the worker is busy anyway; what it drops the poll and the heartbeat catch.
	sub := w.notifier.Subscribe(256, catalog.ChannelRunnable, catalog.ChannelCancel)
	defer sub.Close()
	cancels := notifier.NewBudget(wakeBurst, wakeEvery)
	var cancelsLater <-chan time.Time // the turn of a cancellation beyond the budget
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Resync():
			w.Nudge()
			w.cancelMarked(ctx)
		case <-cancelsLater:
			cancelsLater = nil
			cancels.Spend(w.cfg.Clock.Now())
			if w.runsAny() && w.cancelMarked(ctx) {
				cancels.Refill()
			}
		case n := <-sub.C():
			switch n.Channel {
			case catalog.ChannelRunnable:
				// Our own completions nudge us directly; a second, empty claim would only
				// delay the next real one.
				if n.Payload != strconv.FormatInt(w.ID(), 10) {
					w.notify()
				}
			case catalog.ChannelCancel:
				// The payload names no job: anyone may listen. The catalog says which are
				// ours. One beyond the budget waits for its turn, and those that come
				// meanwhile merge into it.
				if cancelsLater != nil || !w.runsAny() {
					break
				}
				if wait := cancels.Take(w.cfg.Clock.Now()); wait > 0 {
					cancelsLater = time.After(wait)
				} else if w.cancelMarked(ctx) {
					cancels.Refill()
				}
			}
		}
	}
}

// notify tells the fetch loop that a notification says work may be runnable; it claims
// within its budget (awaitClaim).
func (w *Worker) notify() {
	select {
	case w.notified <- struct{}{}:
	default:
	}
}

func (w *Worker) runsAny() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running) > 0
}

// cancelMarked stops the worker's tasks that the catalog marks cancelling, or whose job was
// paused at once, and reports whether there were any.
func (w *Worker) cancelMarked(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
	defer cancel()
	stops, err := w.cat.StoppingTasks(ctx, w.ID())
	if err != nil {
		w.log.Warn("could not read cancelled tasks", "err", err)
		return false
	}
	w.stop(stops)
	return len(stops.Cancel)+len(stops.Release) > 0
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
