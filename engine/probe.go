package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// probeConcurrency bounds the nodes the leader probes at once.
const probeConcurrency = 16

// probeLoop records each node's role and WAL position every 5 × MaintenanceInterval while the
// worker leads. It runs beside the leader's rounds rather than in them: a probe waits up to
// nodeconn.Probe's timeout for a node that does not answer, and rescuing the tasks of dead
// workers must not wait for the fleet's slowest node.
func (w *Worker) probeLoop(ctx context.Context) {
	every := 5 * w.cfg.MaintenanceInterval
	for {
		began := time.Now()
		w.probeNodes(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every - time.Since(began)):
		}
	}
}

// probeNodes probes every node, probeConcurrency at a time, as its registered user sees it,
// and records the checks as they come in: whatever has arrived while the previous write was
// under way goes in the next one, so a node that does not answer holds back no other's check,
// and a fleet that answers at once is recorded in a few statements rather than one per node.
func (w *Worker) probeNodes(ctx context.Context) {
	nodes, err := w.cat.NodesToProbe(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("could not list nodes to probe", "err", err)
		}
		return
	}
	// Nodes that answered last time first: those that did not may each hold a slot for the
	// whole of the probe's timeout.
	slices.SortStableFunc(nodes, func(a, b deckhandtype.Node) int {
		return cmp.Compare(boolRank(a.LastError != nil), boolRank(b.LastError != nil))
	})
	checks := make(chan catalog.NodeCheck, len(nodes))
	go func() {
		var wg sync.WaitGroup
		slots := make(chan struct{}, probeConcurrency)
		for _, n := range nodes {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				role, lsn, err := nodeconn.Probe(ctx, w.pools, n.DSN)
				if err == nil && lsn != "" {
					// What the catalog stores is the position as deckhand reads it, never the
					// node's text: one node's answer must not fail the batch its check joins.
					if at, parseErr := deckhandtype.ParseLSN(lsn); parseErr != nil {
						role, lsn, err = "", "", fmt.Errorf("the node reported a WAL position that is not one: %q", lsn)
					} else {
						lsn = at.String()
					}
				}
				checks <- catalog.NodeCheck{Name: n.Name, Role: role, LSN: lsn, Err: err}
			}()
		}
		wg.Wait()
		close(checks)
	}()
	for check := range checks {
		batch := []catalog.NodeCheck{check}
	drain:
		for {
			select {
			case c, ok := <-checks:
				if !ok {
					break drain
				}
				batch = append(batch, c)
			default:
				break drain
			}
		}
		skipped, err := w.cat.RecordNodeChecks(ctx, batch)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("could not record node checks", "nodes", len(batch), "err", err)
		}
		if len(skipped) > 0 {
			w.log.Debug("node rows held by others; their checks wait for the next round", "nodes", skipped)
		}
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
