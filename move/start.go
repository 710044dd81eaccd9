package move

import (
	"context"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// Start submits a job of one move and returns its id. It refuses, as bad input and before
// anything is written, a request that does not check, a group with no nodes, an owner the
// submitter is not a member of on either group's primary (as Submit checks for tasks that
// name their node), a move of something a live job is already moving, and one whose --from
// is not the group the catalog places the object on; what needs the nodes themselves (a
// table without a key, wal_level, the target having the schema) is refused by the task when
// it starts, as a permanent failure, before it creates anything.
func Start(ctx context.Context, c *engine.Client, req Request) (int64, error) {
	task, err := req.Task("move")
	if err != nil {
		return 0, err
	}
	p, err := ParsePayload(task.Payload)
	if err != nil {
		return 0, spec.Invalidf("%v", err)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return 0, err
	}
	for _, g := range []string{p.From, p.To} {
		found := false
		for _, n := range nodes {
			found = found || n.Group == g
		}
		if !found {
			return 0, spec.Invalidf("node group %q has no nodes (see `deckhand node list`)", g)
		}
	}
	// A move task names no node, so Submit's owner check has nothing to check: make it here,
	// on each group's primary, as the task will (it checks again there before anything runs).
	submitter, err := c.Submitter(ctx)
	if err != nil {
		return 0, err
	}
	owner := task.Owner
	if owner == "" {
		owner = submitter
	}
	for _, g := range []string{p.From, p.To} {
		if primary, ok := knownPrimary(nodes, g); ok {
			if err := c.CheckOwner(ctx, primary, owner, submitter); err != nil {
				return 0, err
			}
		}
	}
	moving, err := c.Catalog().MovesUnderWay(ctx)
	if err != nil {
		return 0, err
	}
	for _, o := range p.objects() {
		for _, m := range moving {
			if m.Schema != o.Schema {
				continue
			}
			// A schema's move covers its tables, and a table's move is part of its schema's.
			if o.Table == "" || m.Table == nil || *m.Table == o.Table {
				return 0, spec.Invalidf("%s is already being moved by job %d", o, m.JobID)
			}
		}
	}
	// Where the catalog places an object already says whether --from is right: refuse now,
	// naming the group, rather than submit a job whose task fails on the source with "does
	// not exist". The task checks again (BeginMove), as for moves submitted as job specs.
	placed, err := c.Catalog().Placements(ctx)
	if err != nil {
		return 0, err
	}
	for _, o := range p.objects() {
		if pl := placedElsewhere(placed, o, p.From); pl != nil {
			where := deckhandtype.PlacedObject{Schema: pl.Schema}
			if pl.Table != nil {
				where.Table = *pl.Table
			}
			by := ""
			if pl.JobID != nil {
				by = fmt.Sprintf(" (moved there by job %d)", *pl.JobID)
			}
			return 0, spec.Invalidf("%s is on group %s%s, not %s (see `deckhand placements`)", where, pl.Group, by, p.From)
		}
	}
	return c.Submit(ctx, &spec.Job{Description: p.Description(), Kind: Kind, Tasks: []spec.Task{task}})
}

// knownPrimary is the node of group that a move uses, as the task finds it: its node with
// role primary, or its only node before the leader has probed it; ok is false when the
// catalog does not tell yet (the task then waits for the probe).
func knownPrimary(nodes []deckhandtype.Node, group string) (name string, ok bool) {
	var members, primaries []string
	for _, n := range nodes {
		if n.Group == group {
			members = append(members, n.Name)
			if n.Role == "primary" {
				primaries = append(primaries, n.Name)
			}
		}
	}
	if len(primaries) == 0 && len(members) == 1 {
		primaries = members
	}
	if len(primaries) != 1 {
		return "", false
	}
	return primaries[0], true
}

// placedElsewhere returns the placement that puts o on a group other than from, as
// catalog.BeginMove reads them: a table is where its own row says, else where its schema's
// says; a schema, and every table of it placed apart, where their rows say.
func placedElsewhere(placed []deckhandtype.Placement, o deckhandtype.PlacedObject, from string) *deckhandtype.Placement {
	var schemaRow *deckhandtype.Placement
	for i := range placed {
		pl := &placed[i]
		if pl.Schema != o.Schema {
			continue
		}
		switch {
		case o.Table == "" || (pl.Table != nil && *pl.Table == o.Table):
			if pl.Group != from {
				return pl
			}
			if o.Table != "" {
				return nil // the table's own row wins over its schema's
			}
		case pl.Table == nil:
			schemaRow = pl
		}
	}
	if schemaRow != nil && schemaRow.Group != from {
		return schemaRow
	}
	return nil
}

// Describe is the one-line summary of a request, for the command line.
func (r Request) Describe() string {
	p, err := r.Payload()
	if err != nil {
		return fmt.Sprintf("move (%v)", err)
	}
	return p.Description()
}
