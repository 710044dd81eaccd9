package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

const (
	workerTasks   = 4 // tasks each worker runs at a time
	shutdownGrace = 5 * time.Second
)

// workers are the demo's in-process workers, each what a `deckhand serve` process would be.
type workers struct {
	names  map[int64]string // catalog worker id → name
	ws     []*engine.Worker
	cats   []*catalog.Catalog
	cancel context.CancelFunc
	done   chan struct{}
	// failed is closed when a worker stops on its own; err says why.
	failed   chan struct{}
	failOnce sync.Once
	err      error
	stopped  bool
}

// startWorkers runs the in-process workers until stop; each has its own catalog pool, as
// separate `deckhand serve` processes would.
func (r *runner) startWorkers(ctx context.Context) (*workers, error) {
	// The workers outlive ctx: on Ctrl-C they must shut down gracefully, not be cut off.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ws := &workers{names: map[int64]string{}, cancel: cancel, done: make(chan struct{}), failed: make(chan struct{})}
	var wg sync.WaitGroup
	var names []string
	for i := range r.opts.Workers {
		cat, err := catalog.Open(ctx, r.catalogDSN)
		if err != nil {
			cancel()
			wg.Wait()
			for _, c := range ws.cats {
				c.Close()
			}
			return nil, err
		}
		name := fmt.Sprintf("demo-%d", i+1)
		names = append(names, name)
		w := engine.NewWorker(cat, engine.Config{
			Name: name, Concurrency: workerTasks, ShutdownGrace: shutdownGrace,
			LeaseTTL: 10 * time.Second, Logger: r.opts.Logger,
		})
		ws.ws = append(ws.ws, w)
		ws.cats = append(ws.cats, cat)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.Run(wctx)
			if wctx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				ws.failOnce.Do(func() { ws.err = fmt.Errorf("worker %s: %w", name, err); close(ws.failed) })
			}
		}()
	}
	go func() { wg.Wait(); close(ws.done) }()
	// Registration gives each worker its id, by which attempts name the worker that ran them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, w := range ws.ws {
			all = all && w.ID() != 0
		}
		if all {
			break
		}
		select {
		case <-ws.failed:
			ws.stop(r)
			return nil, ws.err
		case <-ctx.Done():
			ws.stop(r)
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			ws.stop(r)
			return nil, errors.New("workers did not register within 10s")
		}
	}
	for i, w := range ws.ws {
		ws.names[w.ID()] = names[i]
	}
	r.printf("  workers   %s, in this process, %d tasks at a time each\n", strings.Join(names, " and "), workerTasks)
	return ws, nil
}

// stop shuts the workers down gracefully and waits for them.
func (ws *workers) stop(r *runner) {
	if ws.stopped {
		return
	}
	ws.stopped = true
	r.status.Update("stopping workers…")
	ws.cancel()
	<-ws.done
	for _, c := range ws.cats {
		c.Close()
	}
	r.status.Update("")
}
