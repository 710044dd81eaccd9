package move

import (
	"context"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
)

// A move that got past the copy holds what a later attempt resumes with — the target's
// objects, the slot, the publication, the scratch schema — with pins of its job's operation:
// should its worker die, the cleaner then leaves these resources to the next attempt (which
// takes their records over, or releases the hold and removes them) instead of removing them
// when the dead attempt's operation is found orphaned. The pins last at most as long as the
// job: once it ends, its operation ends and the records are removed as usual. An attempt that
// ends in any other way than by dying releases the hold itself.

const holdReason = "a later attempt of the move may resume with it"

// hold pins r for a later attempt of the task.
func (mv *move) hold(ctx context.Context, r cleanup.Resource) error {
	jobOp, err := mv.Cleaner.BeginJob(ctx, mv.t.JobID, mv.t.Owner, "move: what a later attempt may resume with")
	if err != nil {
		return err
	}
	_, err = jobOp.Pin(ctx, r, holdReason)
	return err
}

// holdScaffold pins what the operation registered that a later attempt would keep.
func (mv *move) holdScaffold(ctx context.Context) error {
	recs, err := mv.Cleaner.Catalog.CleanupRecords(ctx, deckhandtype.CleanupFilter{OperationID: mv.op.ID(), Limit: 100000})
	if err != nil {
		return err
	}
	_, kept, _ := scaffoldOf(recs, mv.src.node.Name, mv.dst.node.Name)
	for _, r := range recs {
		if r.Node != nil && contains(kept, r.ID) {
			if err := mv.hold(ctx, resourceOf(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseHold removes the pins that attempts of task t hold on their resources for a later
// attempt: before a clean restart, and when an attempt ends other than by dying.
func (m Mover) releaseHold(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	recs, err := m.Cleaner.Catalog.CleanupRecords(ctx, deckhandtype.CleanupFilter{JobID: t.JobID, Limit: 100000})
	if err != nil {
		return err
	}
	var jobOp *cleanup.Operation
	for _, r := range recs {
		if r.TaskID == nil || *r.TaskID != t.ID || r.Node == nil {
			continue
		}
		switch r.State {
		case "removed", "forgotten", "failed", "node_removed":
			continue
		}
		if jobOp == nil {
			if jobOp, err = m.Cleaner.BeginJob(ctx, t.JobID, t.Owner, "move: what a later attempt may resume with"); err != nil {
				return err
			}
		}
		if err := jobOp.Unpin(ctx, resourceOf(r)); err != nil {
			return err
		}
	}
	return nil
}

func resourceOf(r deckhandtype.CleanupRecord) cleanup.Resource {
	node := ""
	if r.Node != nil {
		node = *r.Node
	}
	return cleanup.Resource{Type: r.Type, Node: node, Location: r.Location, Name: r.Name}
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
