package engine

import (
	"context"
	"errors"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A node's max_tasks slots pass from task to task through the catalog: a task that ends frees
// its slot when its result is recorded, and the claim in that same transaction fills it. On a
// busy node every next task would wait for that round trip, and each batch of results would
// carry few of them. So a worker whose tasks on a node turn over claims some of the node's next
// tasks ahead (catalog.Ahead): they wait in the worker, and each starts in the slot of the next
// of the worker's tasks on that node to end. The ended task's result names it
// (catalog.Result.HandedTo), and recording the result hands it the slot in the catalog. What
// runs on the node never exceeds what the catalog counts against max_tasks.
//
// nodeSlots is one node's share of that, in this worker: its tasks there that hold a slot,
// those claimed ahead waiting for one, and how many of the first ended since the last claim
// that asked for tasks ahead.
type nodeSlots struct {
	holding  int
	waiting  []*waitingTask
	vacant   []*vacancy
	turnover int
}

// vacancy is the slot of a task that ended with no task waiting for it, while its result has
// not gone into a batch yet: the catalog still counts the slot as the worker's, and a task
// claimed ahead that arrives meanwhile starts in it at once; the result then hands it over.
type vacancy struct {
	node string
	to   *deckhandtype.ClaimedTask // the task that took the slot, if one did
}

// waitingTask is a task claimed ahead, waiting for a slot.
type waitingTask struct {
	task   *deckhandtype.ClaimedTask
	turn   chan struct{} // closed once a slot is handed to it and the handing result is sent
	handed bool          // a slot was handed to it (set under Worker.mu)
	noSlot bool          // it was dropped: no slot is left to hand it (set under Worker.mu)
}

// slotNode is the node whose max_tasks slots t holds or waits for, or "" for none: tasks that
// run anywhere hold none, and export coordinators have slots of their own (claimSQL).
func slotNode(t *deckhandtype.ClaimedTask) string {
	if t.Node == nil || t.Kind == "export" {
		return ""
	}
	return *t.Node
}

// errNoSlot ends a task claimed ahead that no slot came to: the worker's tasks on its node
// ended while the claim was on its way, or none ended within aheadWaitLimit. It is released,
// uncharged, without having run.
var errNoSlot = errors.New("claimed ahead of a slot on its node, and no task of its worker there handed it one")

// aheadWaitLimit bounds how long a task claimed ahead waits for a slot. Ahead claims are made
// where tasks turn over in milliseconds; one that waits longer is better off back in the
// queue, where any worker may take the node's next free slot for it.
const aheadWaitLimit = time.Second

// addSlotTask notes a claimed task in its node's share: a holder; or, claimed ahead, a holder
// at once in a vacancy when nothing waits before it, else a waiting task, returned. A task
// claimed ahead when the worker neither runs a task on the node nor has a vacancy there (its
// tasks ended while the claim was on its way, and their results are in a batch) has nothing to
// wait for: noSlot. While one runs, each that ends hands its slot to the first waiting task,
// which hands it on in turn: every waiting task gets a slot. Called with w.mu held.
func (w *Worker) addSlotTask(t *deckhandtype.ClaimedTask) (wt *waitingTask, noSlot bool) {
	node := slotNode(t)
	if node == "" {
		return nil, false
	}
	s := w.slots[node]
	if s == nil {
		s = &nodeSlots{}
		w.slots[node] = s
	}
	if !t.Queued {
		s.holding++
		return nil, false
	}
	if len(s.waiting) == 0 && len(s.vacant) > 0 {
		v := s.vacant[0]
		s.vacant = s.vacant[1:]
		v.to = t
		s.holding++
		return nil, false
	}
	if s.holding <= 0 {
		w.forgetIdle(node, s)
		return nil, true
	}
	wt = &waitingTask{task: t, turn: make(chan struct{})}
	s.waiting = append(s.waiting, wt)
	return wt, false
}

// releaseSlot frees the slot of t, which ended, or hands it to the first task waiting on its
// node, returned. A slot is handed over only when t's result will be recorded (handOver): the
// result is what hands it over in the catalog. Called with w.mu held.
func (w *Worker) releaseSlot(t *deckhandtype.ClaimedTask, handOver bool) *waitingTask {
	node := slotNode(t)
	s := w.slots[node]
	if s == nil {
		return nil
	}
	if handOver {
		s.turnover++
		if len(s.waiting) > 0 {
			next := s.waiting[0]
			s.waiting = s.waiting[1:]
			next.handed = true
			return next
		}
		v := &vacancy{node: node}
		s.vacant = append(s.vacant, v)
		w.vacancies[attempt{t.ID, t.Token}] = v
	}
	s.holding--
	if s.holding <= 0 {
		// Nothing left to hand the waiting tasks a slot (only when this one's result is not
		// recorded: otherwise it handed its slot on): they are released.
		for _, wt := range s.waiting {
			wt.noSlot = true
			close(wt.turn)
		}
		s.waiting = nil
	}
	w.forgetIdle(node, s)
	return nil
}

// awaitSlot waits until a slot is handed to wt, and returns nil once one is; otherwise what
// ended the wait (the task's context's cause: cancelled, paused, shut down; or errNoSlot), and
// the task ends without running.
func (w *Worker) awaitSlot(ctx context.Context, wt *waitingTask) error {
	limit := time.NewTimer(aheadWaitLimit)
	defer limit.Stop()
	var ended error
	select {
	case <-wt.turn:
	case <-ctx.Done():
		ended = context.Cause(ctx)
	case <-limit.C:
		ended = errNoSlot
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case wt.handed:
		// Handed, perhaps at the same moment: it holds the slot, and runs (stopping at once
		// if its context ended) to hand it on.
		return nil
	case wt.noSlot:
		return errNoSlot // already out of the waiting list
	}
	node := slotNode(wt.task)
	s := w.slots[node]
	for i, o := range s.waiting {
		if o == wt {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			break
		}
	}
	w.forgetIdle(node, s)
	return ended
}

// sealVacancies closes the vacancies of the results of a batch about to be recorded: the
// batch frees their slots in the catalog, and those a task took are handed to it instead.
func (w *Worker) sealVacancies(batch []catalog.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.vacancies) == 0 {
		return
	}
	for i, r := range batch {
		v, ok := w.vacancies[attempt{r.TaskID, r.Token}]
		if !ok {
			continue
		}
		delete(w.vacancies, attempt{r.TaskID, r.Token})
		if v.to != nil {
			batch[i].HandedTo, batch[i].HandedToken = v.to.ID, v.to.Token
			w.cfg.Metrics.HandedOver.Inc()
			continue
		}
		if s := w.slots[v.node]; s != nil {
			for j, o := range s.vacant {
				if o == v {
					s.vacant = append(s.vacant[:j], s.vacant[j+1:]...)
					break
				}
			}
			w.forgetIdle(v.node, s)
		}
	}
}

// forgetIdle drops a node's share once nothing holds, waits or is counted there.
func (w *Worker) forgetIdle(node string, s *nodeSlots) {
	if s.holding <= 0 && len(s.waiting) == 0 && len(s.vacant) == 0 && s.turnover == 0 {
		delete(w.slots, node)
	}
}

// aheadWanted is what the next claim asks for ahead on each node where some of the worker's
// tasks ended since the last such claim (where tasks turn over: behind long ones, tasks
// claimed ahead would only wait): one waiting task for each of its tasks running there or
// ended since (the slots the claim refills), less those already waiting; fastTurnoverDepth
// times as many where at least as many of its tasks there ended since that claim as it holds
// slots (two, on a node where it holds one or none): its slots turned over as fast as its
// claims come back, or faster.
func (w *Worker) aheadWanted() catalog.Ahead {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ahead catalog.Ahead
	for node, s := range w.slots {
		want := max(s.holding, s.turnover)
		if s.turnover >= max(s.holding, 2) {
			want *= fastTurnoverDepth
		}
		if n := want - len(s.waiting); s.turnover > 0 && n > 0 {
			if ahead == nil {
				ahead = catalog.Ahead{}
			}
			ahead[node] = n
		}
		s.turnover = 0
		w.forgetIdle(node, s)
	}
	return ahead
}

// fastTurnoverDepth is how many tasks a worker keeps waiting per slot on a node whose tasks
// end faster than its claims come back (a batch's round trip, a few milliseconds to tens
// under load): one task waiting per slot runs out before the next claim refills it, and the
// slot stands idle meanwhile. Three keep a busy node's slots full through a claim's round
// trip (docs/benchmarks.md, "Waiting tasks per slot"), and each waits for a few of those
// short tasks at most. Where tasks take longer than a claim's round trip, one waiting task
// per slot is enough, and deeper queues would only keep tasks from other workers for longer.
const fastTurnoverDepth = 3

// releaseWaiting ends the tasks claimed ahead that wait for a slot: a stopping worker starts
// nothing new. They are released, uncharged, without having run.
func (w *Worker) releaseWaiting() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.slots {
		for _, wt := range s.waiting {
			if rt, ok := w.running[wt.task.ID]; ok {
				rt.cancel(errShutdown)
			}
		}
	}
}
