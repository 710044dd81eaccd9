package engine

import (
	"context"
	"time"
)

// Retainer is a leader service that keeps history of its own, such as the cleaner's ended
// operations and records. The leader's retention service calls Retain with the time on the
// worker's clock, so that all history is deleted on one clock by one loop.
type Retainer interface {
	Retain(ctx context.Context, now time.Time) error
}

// How often each retention is applied. Deleting finished jobs is cheap (an index on
// finished_at) and keeps the catalog small under load; what Retainers keep is small and
// their deletes may scan.
const (
	jobRetentionEvery    = time.Minute
	retainersRetainEvery = time.Hour
)

// retention is the leader service that deletes history past its retention: finished jobs
// after the catalog setting retention (else Config.Retention), and what the Retainers among
// the leader services keep, after their own retention. Both the schedule and the cutoffs are
// read on Config.Clock, which the service looks at every MaintenanceInterval: a test moves
// the clock rather than waiting.
type retention struct {
	w         *Worker
	retainers []Retainer
}

// retention builds the service for the Retainers among services.
func (w *Worker) retention(services []Service) *retention {
	r := &retention{w: w}
	for _, s := range services {
		if rt, ok := s.(Retainer); ok {
			r.retainers = append(r.retainers, rt)
		}
	}
	return r
}

func (r *retention) Run(ctx context.Context) error {
	tick := time.NewTicker(r.w.cfg.MaintenanceInterval)
	defer tick.Stop()
	var jobsAt, retainersAt time.Time // zero: due at once
	for {
		now := r.w.cfg.Clock.Now()
		if now.Sub(jobsAt) >= jobRetentionEvery {
			r.deleteFinishedJobs(ctx, now)
			jobsAt = now
		}
		if now.Sub(retainersAt) >= retainersRetainEvery {
			for _, rt := range r.retainers {
				if err := rt.Retain(ctx, now); err != nil && ctx.Err() == nil {
					r.w.log.Warn("retention failed", "err", err)
				}
			}
			retainersAt = now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// deleteFinishedJobs deletes the jobs that ended more than the retention before now, in
// batches so that no transaction holds many locks, then the export destinations no export
// names any longer.
func (r *retention) deleteFinishedJobs(ctx context.Context, now time.Time) {
	w := r.w
	keep := w.cfg.Retention
	if v, err := w.cat.Setting(ctx, "retention", ""); err == nil && v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			keep = d
		}
	}
	const batch = 500
	for ctx.Err() == nil {
		n, err := w.cat.DeleteFinishedJobs(ctx, now.Add(-keep), batch)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("retention failed", "err", err)
			}
			return
		}
		if n > 0 {
			w.log.Info("deleted finished jobs past retention", "jobs", n)
		}
		if n < batch {
			break
		}
	}
	for ctx.Err() == nil {
		n, err := w.cat.DeleteUnusedExportDestinations(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("retention failed", "err", err)
			}
			return
		}
		if n < batch {
			return
		}
	}
}
