package engine

import (
	"context"
	"sync"
	"time"
)

// lead stands for election every MaintenanceInterval and, while leading, rescues tasks of
// dead workers, probes nodes, and runs the leader services (the cleaner, retention, the
// features' services). Leadership is a lease row in the catalog, so losing the leader loses
// nothing: the next one picks up where it stopped.
func (w *Worker) lead(ctx context.Context) {
	if w.cfg.NoLeader {
		return
	}
	tick := time.NewTicker(w.cfg.MaintenanceInterval)
	defer tick.Stop()
	defer w.rescues.wg.Wait() // they end with ctx
	stopServices := func() {}
	defer func() { stopServices() }()
	for {
		leading, err := w.cat.TryLead(ctx, w.ID(), w.cfg.LeaseTTL)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("leader election failed", "err", err)
		}
		if leading != w.leading.Load() {
			w.leading.Store(leading)
			w.log.Info("leadership changed", "leading", leading)
			if leading {
				w.cfg.Metrics.Leader.Set(1)
				stopServices = w.startServices(ctx)
			} else {
				w.cfg.Metrics.Leader.Set(0)
				stopServices()
				stopServices = func() {}
			}
		}
		if leading {
			w.rescue(ctx)
			w.failStranded(ctx)
			// Completions settle the jobs they may have ended; this folds what a settling
			// that failed, or a race it cannot see, left behind.
			if err := w.cat.SettleJobs(ctx, nil); err != nil && ctx.Err() == nil {
				w.log.Warn("settling jobs failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startServices runs the leader services until the returned function is called.
func (w *Worker) startServices(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.probeLoop(ctx) }()
	for _, svc := range w.cfg.LeaderServices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := svc.Run(ctx); err != nil && ctx.Err() == nil {
				w.log.Error("leader service stopped", "err", err)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}
