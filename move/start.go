package move

import (
	"context"
	"fmt"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// Start submits a job of one move and returns its id. It refuses, as bad input and before
// anything is written, a request that does not check, a group with no nodes, and a move of
// something a live job is already moving; what needs the nodes themselves (a table without a
// key, wal_level, the target having the schema) is refused by the task when it starts, as a
// permanent failure, before it creates anything.
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
	return c.Submit(ctx, &spec.Job{Description: p.Description(), Kind: Kind, Tasks: []spec.Task{task}})
}

// Describe is the one-line summary of a request, for the command line.
func (r Request) Describe() string {
	p, err := r.Payload()
	if err != nil {
		return fmt.Sprintf("move (%v)", err)
	}
	return p.Description()
}
