package move

import (
	"context"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// checkSubmission is the move kind's engine.Kind.Check: what every submission of moves is
// refused for, as bad input and before anything is written — `deckhand move`, a rebalance's
// job, a job spec or a schedule's firing alike. It refuses a group with no nodes, an owner
// the submitter is not a member of on either group's primary (Submit checks owners only on
// nodes a task names, and a move names groups), a move of something a live job is already
// moving, and one whose from is not the group the catalog places the object on (unless a move
// of the same job takes it there: a job may move a schema and then back or on). What needs
// the nodes themselves (a table without a key, wal_level, the target having the schema) is
// refused by the task when it starts, as a permanent failure, before it creates anything; the
// task checks all of this again then.
//
// A live job moves an object from its submission on, not only once its move has begun: the
// catalog checks that again as it writes the job, under a lock of each schema moved
// (deckhand.admit_moves, with this check's message), so that of two submissions of one
// object at the same moment, which both pass here, one is refused there.
func checkSubmission(ctx context.Context, c *engine.Client, submitter string, tasks []spec.Task) error {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	moving, err := c.Catalog().LiveMoves(ctx)
	if err != nil {
		return err
	}
	placed, err := c.Catalog().Placements(ctx)
	if err != nil {
		return err
	}
	bySchema := placementsBySchema(placed)
	payloads := make([]Payload, len(tasks))
	// The groups the job's own moves take something of each schema to: a move from such a
	// group may follow one of them (a round trip, a move on), so where the catalog places
	// that schema now does not say its from is wrong. The task checks again when it begins.
	arriving := map[[2]string]bool{} // schema, group
	for i, t := range tasks {
		p, err := ParsePayload(t.Payload)
		if err != nil {
			return spec.Invalidf("task %q: %v", t.Name, err)
		}
		payloads[i] = p
		for _, o := range p.objects() {
			arriving[[2]string{o.Schema, p.To}] = true
		}
	}
	checked := map[[2]string]bool{} // primary, owner
	for i, t := range tasks {
		p := payloads[i]
		if err := checkGroups(nodes, p); err != nil {
			return taskError(t, err)
		}
		for _, g := range []string{p.From, p.To} {
			primary, ok := knownPrimary(nodes, g)
			if !ok || checked[[2]string{primary, t.Owner}] {
				continue
			}
			checked[[2]string{primary, t.Owner}] = true
			if err := c.CheckOwner(ctx, primary, t.Owner, submitter); err != nil {
				return fmt.Errorf("task %q: %w", t.Name, err) // still bad input, or a node that did not answer
			}
		}
		if err := checkNotMoving(moving, p); err != nil {
			return taskError(t, err)
		}
		if err := checkFrom(bySchema, p, arriving); err != nil {
			return taskError(t, err)
		}
	}
	return nil
}

// taskError names the task in err, as Submit's own checks do.
func taskError(t spec.Task, err error) error { return spec.Invalidf("task %q: %v", t.Name, err) }

// checkGroups refuses a move between groups of which one has no nodes.
func checkGroups(nodes []deckhandtype.Node, p Payload) error {
	for _, g := range []string{p.From, p.To} {
		found := false
		for _, n := range nodes {
			found = found || n.Group == g
		}
		if !found {
			return fmt.Errorf("node group %q has no nodes (see `deckhand node list`)", g)
		}
	}
	return nil
}

// checkNotMoving refuses a move of what a live job already moves or is to move: a schema's
// move covers its tables, and a table's move is part of its schema's. deckhand.admit_moves
// words its refusal as this one does.
func checkNotMoving(moving []deckhandtype.PlacementMove, p Payload) error {
	for _, o := range p.objects() {
		for _, m := range moving {
			if m.Schema == o.Schema && (o.Table == "" || m.Table == nil || *m.Table == o.Table) {
				return fmt.Errorf("%s is already being moved by job %d", o, m.JobID)
			}
		}
	}
	return nil
}

// checkFrom refuses a move whose from is not where the catalog places the object: refused
// now, naming the group, rather than a job whose task fails on the source with "does not
// exist". The task checks again (BeginMove). An object of a schema that a move of the same
// job takes to from (arriving) is not checked: that move may be the one this follows.
func checkFrom(placed map[string][]deckhandtype.Placement, p Payload, arriving map[[2]string]bool) error {
	for _, o := range p.objects() {
		if arriving[[2]string{o.Schema, p.From}] {
			continue
		}
		pl := placedElsewhere(placed[o.Schema], o, p.From)
		if pl == nil {
			continue
		}
		where := deckhandtype.PlacedObject{Schema: pl.Schema}
		if pl.Table != nil {
			where.Table = *pl.Table
		}
		by := ""
		if pl.JobID != nil {
			by = fmt.Sprintf(" (moved there by job %d)", *pl.JobID)
		}
		return fmt.Errorf("%s is on group %s%s, not %s (see `deckhand placements`)", where, pl.Group, by, p.From)
	}
	return nil
}

// placementsBySchema groups placements by schema, as placedElsewhere reads them: a job of
// thousands of moves (a rebalance of tenant schemas) over as many placements would otherwise
// read every placement for each move.
func placementsBySchema(placed []deckhandtype.Placement) map[string][]deckhandtype.Placement {
	out := map[string][]deckhandtype.Placement{}
	for _, pl := range placed {
		out[pl.Schema] = append(out[pl.Schema], pl)
	}
	return out
}
