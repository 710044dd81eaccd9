package engine

import (
	"context"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// sideCompleter records results while the completer's own batch is being written, on a
// catalog connection of its own, without claiming. One worker's catalog work otherwise runs
// one transaction at a time (a batch and its claim, under claimMu), and a busy worker's results
// wait for it: with noop tasks, one catalog backend at a full CPU and the rest of the machine
// idle. A batch it records frees its slots without refilling them; the completer's next batch
// claims for every free slot, and a nudge wakes the fetch loop should none come.
//
// It takes results only while the completer's batch is in flight (open): a worker whose
// completer is idle records each result with a claim, so a dependent starts in the commit that
// released it.
type sideCompleter struct {
	w      *Worker
	mu     sync.Mutex
	opened chan struct{} // closed while a window is open
	done   sync.WaitGroup
}

// startSideCompleter starts one for w, which runs until ctx ends or stop closes; wait waits
// for it.
func startSideCompleter(ctx context.Context, w *Worker, stop <-chan struct{}) *sideCompleter {
	s := &sideCompleter{w: w, opened: make(chan struct{})}
	s.done.Add(1)
	go s.run(ctx, stop)
	return s
}

// open lets the side take results until close.
func (s *sideCompleter) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.opened:
	default:
		close(s.opened)
	}
}

// close ends the window; a batch the side took meanwhile is still recorded.
func (s *sideCompleter) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.opened:
		s.opened = make(chan struct{})
	default:
	}
}

func (s *sideCompleter) window() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// run takes and records results in open windows until ctx ends or stop closes.
func (s *sideCompleter) run(ctx context.Context, stop <-chan struct{}) {
	defer s.done.Done()
	for {
		select {
		case <-s.window():
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		if len(s.w.results) < sideBacklog {
			select {
			case <-time.After(time.Millisecond):
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
			continue
		}
		var r catalog.Result
		select {
		case r = <-s.w.results:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		batch := drainResults(s.w.results, []catalog.Result{r})
		s.w.sealVacancies(batch)
		if !s.w.record(ctx, batch, false) {
			return
		}
		s.w.cfg.Metrics.SideBatches.Inc()
	}
}

func (s *sideCompleter) wait() { s.done.Wait() }

// sideBacklog is how many results must wait before the side completer takes them: a few
// hundred come in one batch's time only from many short tasks over many slots.
const sideBacklog = 256

// maxBatch bounds one batch of results.
const maxBatch = 2000

// drainResults appends to batch the results waiting in results, up to maxBatch in all.
func drainResults(results <-chan catalog.Result, batch []catalog.Result) []catalog.Result {
	for len(batch) < maxBatch {
		select {
		case r := <-results:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}
