package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
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

// rescue hands the tasks of dead workers back to the queue. The old backend on the node is
// terminated first, so a task never runs twice at the same time; if that is not possible
// yet (node unreachable), the task waits for the next round.
func (w *Worker) rescue(ctx context.Context) {
	orphans, err := w.cat.ExpireWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("could not look for dead workers", "err", err)
		}
		return
	}
	var results []catalog.Result
	for _, o := range orphans {
		r, ok := w.rescueOne(ctx, o)
		if ok {
			results = append(results, r)
		}
	}
	if len(results) == 0 {
		return
	}
	comp, err := w.cat.Complete(ctx, results)
	if err != nil {
		w.log.Warn("could not rescue tasks", "err", err)
		return
	}
	w.log.Info("rescued tasks of dead workers", "tasks", comp.Applied)
	w.Nudge()
}

// rescueOne decides what became of an orphaned attempt; false when it must wait for the next
// round (its node is unreachable). The attempt's backend is terminated first, so the task
// never runs twice at the same time and the attempt can commit nothing more. Then, for a
// transactional attempt that recorded its node transaction, the node says whether it
// committed: if so the task is done — its result is recovered, not run again.
func (w *Worker) rescueOne(ctx context.Context, o catalog.Orphan) (catalog.Result, bool) {
	lost := catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeLost,
		FinishedAt: w.injectedNow(),
		Err:        &deckhandtype.TaskError{Message: fmt.Sprintf("worker %d stopped heartbeating; its lease expired", o.WorkerID)}}
	if !o.InTransaction {
		lost.Err.Message += "; the task does not run in a transaction, so its effect is unknown: it may have taken effect, and it runs again"
	}
	if o.Node == nil || o.NodeDSN == nil {
		return lost, true
	}
	owner := nodeconn.Owner{Node: *o.Node, DSN: *o.NodeDSN, Role: o.Owner, Submitter: o.SubmittedBy}
	err := nodeconn.TerminateAttempt(ctx, w.pools, owner, o.TaskID, o.Token)
	switch {
	case nodeconn.Refused(err):
		// The submitter may not act as the owner there: no attempt can have run as it, so there
		// is nothing to terminate. The task goes back and its next attempt is refused the same way.
		w.log.Warn("orphaned task's owner refused on its node; nothing to terminate", "task", o.TaskID, "node", *o.Node, "err", err)
		return lost, true
	case err != nil:
		w.log.Warn("could not terminate orphaned backend; will retry", "task", o.TaskID, "node", *o.Node, "err", err)
		return catalog.Result{}, false
	}
	if !o.InTransaction {
		return lost, true
	}
	xid, err := w.cat.AttemptXID(ctx, o.TaskID, o.Token)
	if err != nil {
		w.log.Warn("could not read the orphaned attempt's node transaction; will retry", "task", o.TaskID, "err", err)
		return catalog.Result{}, false
	}
	if xid == "" {
		return lost, true // it committed nothing that wrote
	}
	status, err := nodeconn.XactStatus(ctx, w.pools, owner, xid)
	if err != nil {
		w.log.Warn("could not ask the node about the orphaned attempt's transaction; will retry", "task", o.TaskID, "node", *o.Node, "err", err)
		return catalog.Result{}, false
	}
	switch status {
	case nodeconn.XactCommitted:
		w.log.Info("recovered the result of a dead worker's attempt from its node", "task", o.TaskID, "xid", xid)
		return catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeDone,
			FinishedAt: w.injectedNow(),
			Err: &deckhandtype.TaskError{Message: fmt.Sprintf("recovered: worker %d stopped before recording the result; "+
				"the node had committed the attempt's transaction %s, so the task did its work and does not run again", o.WorkerID, xid)}}, true
	case nodeconn.XactAborted:
		return lost, true
	default:
		// In progress cannot be, with its backend gone; unknown means an id older than the
		// node's oldest commit status: it did not commit recently enough to matter here.
		lost.Err.Message += fmt.Sprintf("; the node reports its transaction %s as %q", xid, status)
		return lost, true
	}
}
