package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/jackc/pgx/v5/pgconn"
)

// rescueConcurrency bounds the nodes on which the leader settles orphaned attempts at once.
// Nodes that were unreachable at their last try get half of the slots at most, so that an
// outage of many nodes leaves room for the others.
const rescueConcurrency = 16

// rescues tracks the nodes whose orphaned attempts are being settled, and those found
// unreachable, so that a round starts each node's at most once and tries the others first.
type rescues struct {
	mu          sync.Mutex
	inFlight    map[string]bool  // node conninfo: whether it was unreachable at its last try
	unreachable map[string]int64 // node conninfo: when (in tries) it was last found unreachable
	tries       int64
	wg          sync.WaitGroup
}

// start claims the node for a rescue unless one runs there already, or there is no slot free
// for it.
func (r *rescues) start(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight == nil {
		r.inFlight, r.unreachable = map[string]bool{}, map[string]int64{}
	}
	_, busy := r.inFlight[node]
	_, suspect := r.unreachable[node]
	if busy || len(r.inFlight) >= rescueConcurrency || suspect && r.suspectsInFlight() >= rescueConcurrency/2 {
		return false
	}
	r.inFlight[node] = suspect
	r.wg.Add(1)
	return true
}

func (r *rescues) suspectsInFlight() int {
	n := 0
	for _, suspect := range r.inFlight {
		if suspect {
			n++
		}
	}
	return n
}

// done ends the node's rescue, noting whether it found the node unreachable.
func (r *rescues) done(node string, unreachable bool) {
	r.mu.Lock()
	delete(r.inFlight, node)
	if unreachable {
		r.tries++
		r.unreachable[node] = r.tries
	} else {
		delete(r.unreachable, node)
	}
	r.mu.Unlock()
	r.wg.Done()
}

// order puts the nodes never found unreachable first, as they are, then the others from the one
// found unreachable longest ago; it forgets the nodes that have no orphans any more.
func (r *rescues) order(nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for node := range r.unreachable {
		if _, busy := r.inFlight[node]; !busy && !slices.Contains(nodes, node) {
			delete(r.unreachable, node)
		}
	}
	slices.SortStableFunc(nodes, func(a, b string) int { return cmp.Compare(r.unreachable[a], r.unreachable[b]) })
}

// rescue hands the tasks of dead workers back to the queue. The old backend on the node is
// terminated first, so a task never runs twice at the same time; if that is not possible
// yet (node unreachable), the task waits for a later round. Tasks bound to no node are settled
// at once; the others node by node, beside the round: a node that does not answer (each
// attempt to reach it waits up to 10 s) holds up only its own orphans, and only until one of
// them finds it unreachable, never the leader's rounds nor other nodes' orphans. The caller
// waits for w.rescues before it exits.
func (w *Worker) rescue(ctx context.Context) {
	orphans, err := w.cat.ExpireWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("could not look for dead workers", "err", err)
		}
		return
	}
	var nowhere []catalog.Orphan
	byNode := map[string][]catalog.Orphan{}
	var nodes []string
	for _, o := range orphans {
		if o.Node == nil || o.NodeDSN == nil {
			// bound to no node, or to one removed from the catalog: there is nothing to reach
			nowhere = append(nowhere, o)
			continue
		}
		if _, seen := byNode[*o.NodeDSN]; !seen {
			nodes = append(nodes, *o.NodeDSN)
		}
		byNode[*o.NodeDSN] = append(byNode[*o.NodeDSN], o)
	}
	if len(nowhere) > 0 {
		w.rescueOn(ctx, nowhere) // nothing to reach: no backend to terminate
	}
	w.rescues.order(nodes)
	for _, node := range nodes {
		if !w.rescues.start(node) {
			continue // under way, or no slot free: a later round sees it again
		}
		go func() {
			unreachable := false
			defer func() { w.rescues.done(node, unreachable) }()
			unreachable = w.rescueOn(ctx, byNode[node])
		}()
	}
}

// rescueOn settles the orphans of one node (or of none), one after another, and records the
// outcomes. It reports whether it found the node unreachable.
func (w *Worker) rescueOn(ctx context.Context, orphans []catalog.Orphan) (nodeUnreachable bool) {
	var results []catalog.Result
	for _, o := range orphans {
		r, err := w.rescueOne(ctx, o)
		if err != nil {
			if unreachable(err) {
				nodeUnreachable = true
				break // the node's other orphans wait for a later round with this one
			}
			continue
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return nodeUnreachable
	}
	comp, err := w.cat.Complete(ctx, results)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("could not rescue tasks", "err", err)
		}
		return nodeUnreachable
	}
	w.log.Info("rescued tasks of dead workers", "tasks", comp.Applied)
	w.Nudge()
	return nodeUnreachable
}

// unreachable reports whether err says a node could not be reached (rather than that one
// attempt could not be settled there).
func unreachable(err error) bool {
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// rescueOne decides what became of an orphaned attempt; an error when it must wait for a later
// round (its node is unreachable, or could not say). The attempt's backend is terminated
// first, so the task never runs twice at the same time and the attempt can commit nothing
// more. Then, for a transactional attempt that recorded its node transaction, the node says
// whether it committed: if so the task is done — its result is recovered, not run again.
func (w *Worker) rescueOne(ctx context.Context, o catalog.Orphan) (catalog.Result, error) {
	lost := catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeLost,
		FinishedAt: w.injectedNow(),
		Err:        &deckhandtype.TaskError{Message: fmt.Sprintf("worker %d stopped heartbeating; its lease expired", o.WorkerID)}}
	if !o.InTransaction {
		lost.Err.Message += "; the task does not run in a transaction, so its effect is unknown: it may have taken effect, and it runs again"
	}
	if o.Node == nil {
		return lost, nil
	}
	if o.NodeDSN == nil {
		// The node was removed from the catalog while the attempt ran: its session there
		// cannot be ended nor its transaction asked about, so the attempt may have committed.
		// Running the task again once a node of that name is registered anew could apply its
		// effect twice, so it fails and says so; `job retry` is the operator's call.
		return catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeFailed,
			FinishedAt: w.injectedNow(),
			Err: &deckhandtype.TaskError{Message: fmt.Sprintf("worker %d stopped heartbeating; its lease expired; its node %s is no longer registered, "+
				"so its session there could not be ended nor its transaction checked: its effect is unknown, and it does not run again on its own "+
				"(deckhand job retry runs it again)", o.WorkerID, *o.Node)}}, nil
	}
	owner := nodeconn.Owner{Node: *o.Node, DSN: *o.NodeDSN, Role: o.Owner, Submitter: o.SubmittedBy}
	err := nodeconn.TerminateAttempt(ctx, w.pools, owner, o.TaskID, o.Token)
	refused := nodeconn.Refused(err)
	switch {
	case refused:
		// The submitter may not act as the owner there (now: the membership may have been
		// revoked after the attempt ran as it). There is nothing to terminate as the owner;
		// whether a transaction committed is still asked, as the node's user (XactStatus):
		// an attempt that committed is done, not run again. Otherwise the task goes back and
		// its next attempt is refused the same way.
		w.log.Warn("orphaned task's owner refused on its node; nothing to terminate", "task", o.TaskID, "node", *o.Node, "err", err)
	case err != nil:
		w.log.Warn("could not terminate orphaned backend; will retry", "task", o.TaskID, "node", *o.Node, "err", err)
		return catalog.Result{}, err
	}
	if !o.InTransaction {
		return lost, nil
	}
	x, err := w.cat.AttemptXID(ctx, o.TaskID, o.Token)
	if err != nil {
		w.log.Warn("could not read the orphaned attempt's node transaction; will retry", "task", o.TaskID, "err", err)
		return catalog.Result{}, err
	}
	xid := x.XID
	if xid == "" {
		return lost, nil // it committed nothing that wrote
	}
	answer, err := nodeconn.XactStatus(ctx, w.pools, owner, xid)
	if err != nil {
		w.log.Warn("could not ask the node about the orphaned attempt's transaction; will retry", "task", o.TaskID, "node", *o.Node, "err", err)
		return catalog.Result{}, err
	}
	outcome, why := nodeconn.Judge(x, *o.Node, answer)
	if refused && outcome == nodeconn.InProgress {
		// Its backend, which could not be terminated, still runs it: ask at a later round.
		return catalog.Result{}, fmt.Errorf("task %d: transaction %s is still in progress on node %s", o.TaskID, xid, *o.Node)
	}
	switch outcome {
	case nodeconn.Committed:
		w.log.Info("recovered the result of a dead worker's attempt from its node", "task", o.TaskID, "xid", xid)
		return catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeDone,
			FinishedAt: w.injectedNow(),
			Err: &deckhandtype.TaskError{Message: fmt.Sprintf("recovered: worker %d stopped before recording the result; "+
				"the node had committed the attempt's transaction %s, so the task did its work and does not run again", o.WorkerID, xid)}}, nil
	case nodeconn.Unknown:
		// The answer is not the transaction's (another server, or another history of it),
		// or there is none any more: running the task again could apply its effect twice,
		// and recording it done could lose it. As for an attempt on a removed node, the
		// task fails and says so; `job retry` is the operator's call.
		w.log.Warn("the orphaned attempt's transaction cannot be checked; the task fails", "task", o.TaskID, "xid", xid, "why", why)
		return catalog.Result{TaskID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID, Outcome: deckhandtype.OutcomeFailed,
			FinishedAt: w.injectedNow(),
			Err: &deckhandtype.TaskError{Message: fmt.Sprintf("worker %d stopped heartbeating; its lease expired; its effect is unknown because %s: "+
				"the task does not run again on its own (deckhand job retry runs it again)", o.WorkerID, why)}}, nil
	case nodeconn.NotCommitted:
		if answer.Status == nodeconn.XactFuture {
			// Asked of a server that never gave out the id (the node failed over before the
			// transaction reached the new primary): it did not commit there. Waiting for a
			// later round would only wait for ever.
			lost.Err.Message += fmt.Sprintf("; the node has not given out its transaction %s (another server since, as after a failover): it did not commit there", xid)
		}
		return lost, nil
	default:
		// In progress cannot be, with its backend gone.
		lost.Err.Message += fmt.Sprintf("; the node reports its transaction %s as %q", xid, answer.Status)
		return lost, nil
	}
}

// failStranded fails the runnable tasks bound to a node that is no longer registered, or to a
// node group with no node left: no worker can reach it, so they would wait for ever and keep
// their jobs from ending. They are taken as a claim takes tasks, then failed through Complete,
// which unschedules their dependents.
// Taken, they are held by this worker, which never starts them, and its lease stays fresh:
// the rescue never settles them, so this does, whatever fails on the way. Failures the catalog
// did not record are recorded at the next round; tasks taken by a statement whose answer was
// lost (or failures never recorded once this worker stops leading) go back to the queue at
// its next claim, as those of a claim whose answer was lost (claimUnsure), and are taken again.
func (w *Worker) failStranded(ctx context.Context) {
	// An export's coordinator follows its group's primary rather than fail with a removed one.
	rebound, err := w.cat.RebindStrandedCoordinators(ctx)
	if err != nil && ctx.Err() == nil {
		w.log.Warn("could not move export coordinators of removed nodes", "err", err)
	}
	for _, r := range rebound {
		w.log.Info("export coordinator moved from a removed node to its group's primary", "task", r.TaskID, "from", r.From, "to", r.To)
	}
	if len(w.strandedUnrecorded) > 0 {
		if _, err := w.cat.Complete(ctx, w.strandedUnrecorded); err != nil {
			if ctx.Err() == nil {
				w.log.Warn("could not fail the tasks of removed nodes; trying again", "err", err)
			}
			return
		}
		w.log.Warn("failed tasks bound to nodes that are no longer registered", "tasks", len(w.strandedUnrecorded))
		w.strandedUnrecorded = nil
	}
	stranded, next, err := w.cat.ClaimStranded(ctx, w.ID(), w.strandedFrom)
	if err != nil {
		w.strandedUnsure()
		if ctx.Err() == nil {
			w.log.Warn("could not look for tasks of removed nodes", "err", err)
		}
		return
	}
	w.strandedFrom = next
	if len(stranded) == 0 {
		return
	}
	results := make([]catalog.Result, len(stranded))
	for i, s := range stranded {
		msg := fmt.Sprintf("node %s is no longer registered (deckhand node remove): the task cannot run; "+
			"register the node again and run deckhand job retry", s.Node)
		if s.Group != nil {
			msg = fmt.Sprintf("node group %s has no registered node left (deckhand node remove): the task cannot run; "+
				"register a node of the group again and run deckhand job retry", *s.Group)
		}
		results[i] = catalog.Result{TaskID: s.TaskID, Token: s.Token, WorkerID: w.ID(), Outcome: deckhandtype.OutcomeFailed,
			FinishedAt: w.injectedNow(), Err: &deckhandtype.TaskError{Message: msg}}
	}
	if _, err := w.cat.Complete(ctx, results); err != nil {
		w.strandedUnrecorded = results
		w.strandedUnsure()
		if ctx.Err() == nil {
			w.log.Warn("could not fail the tasks of removed nodes; trying again", "err", err)
		}
		return
	}
	w.log.Warn("failed tasks bound to nodes that are no longer registered", "tasks", len(stranded))
}

// strandedUnsure makes the next claim give back what this worker holds and never started,
// should failStranded not settle it first.
func (w *Worker) strandedUnsure() {
	w.claimMu.Lock()
	w.claimUnsure = true
	w.claimMu.Unlock()
}
