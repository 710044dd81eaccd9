package engine

import (
	"context"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// sampleProgress reads, every ProgressInterval, how far the statements of this worker's
// running tasks have got (pg_stat_progress_* on their nodes) and records it in the catalog,
// one statement for all of them. Each node is asked once per owner role, in a session as that
// owner reached through OwnerConn (which checks the job's submitter may act as it): PostgreSQL
// shows a role the progress of its own backends only, exactly the task's. The attempt's
// backend is found by its application_name (nodeconn.ApplicationName).
func (w *Worker) sampleProgress(ctx context.Context) {
	if w.cfg.ProgressInterval < 0 {
		return
	}
	tick := time.NewTicker(w.cfg.ProgressInterval)
	defer tick.Stop()
	reported := map[attempt]bool{} // attempts whose last recorded sample was not empty
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		samples := w.readProgress(ctx, reported)
		if len(samples) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.CatalogTimeout)
		err := w.cat.RecordProgress(rctx, samples)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("could not record progress", "err", err)
			}
			continue
		}
		for _, s := range samples {
			a := attempt{s.TaskID, s.Token}
			if s.Progress == nil {
				delete(reported, a)
			} else {
				reported[a] = true
			}
		}
	}
}

// readProgress samples the running tasks' progress: a sample for each task whose statement
// reports one, and an empty one for each that reported one last time but no longer does.
func (w *Worker) readProgress(ctx context.Context, reported map[attempt]bool) []catalog.ProgressSample {
	w.mu.Lock()
	groups, running := progressDue(w.running, w.cfg.Clock.Now().Add(-w.cfg.ProgressInterval))
	w.mu.Unlock()
	for a := range reported {
		if !running[a] {
			delete(reported, a) // ended: its task's row is no longer running, nothing to clear
		}
	}
	// Nodes are asked at once, so that one that does not answer delays no other.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var samples []catalog.ProgressSample
	for o, tasks := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names := make([]string, len(tasks))
			for i, t := range tasks {
				names[i] = nodeconn.ApplicationName(t.ID, t.Token)
			}
			found, err := nodeconn.ReadProgress(ctx, w.progressPools, o, names)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Debug("could not read progress on node", "node", o.Node, "owner", o.Role, "err", err)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, t := range tasks {
				if p, ok := found[names[i]]; ok {
					samples = append(samples, catalog.ProgressSample{TaskID: t.ID, Token: t.Token, Progress: &p})
				} else if reported[attempt{t.ID, t.Token}] {
					samples = append(samples, catalog.ProgressSample{TaskID: t.ID, Token: t.Token})
				}
			}
		}()
	}
	wg.Wait()
	return samples
}

// progressDue groups by node and owner the running tasks on nodes that began by since (a
// sampling interval ago): a task that runs for less than an interval has no progress worth
// showing, and asking every node a worker's short tasks run on, in a session of each owner,
// would cost the nodes more than the tasks (a thousand nodes, a session each per second). It
// also says which attempts are running, sampled or not, so that the samples of those that
// ended are dropped.
func progressDue(tasks map[int64]*runningTask, since time.Time) (map[nodeconn.Owner][]*deckhandtype.ClaimedTask, map[attempt]bool) {
	groups := map[nodeconn.Owner][]*deckhandtype.ClaimedTask{}
	running := map[attempt]bool{}
	for _, r := range tasks {
		t := r.task
		if t == nil || t.Node == nil || t.NodeDSN == nil {
			continue
		}
		running[attempt{t.ID, t.Token}] = true
		if r.began.After(since) {
			continue
		}
		o := nodeconn.Owner{Node: *t.Node, DSN: *t.NodeDSN, Role: t.Owner, Submitter: t.SubmittedBy}
		groups[o] = append(groups[o], t)
	}
	return groups, running
}
