package move

import (
	"context"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// Start submits a job of one move and returns its id. The request is checked without a
// database first, then as every submission of moves is (checkSubmission): nothing is written
// for a request refused there.
func Start(ctx context.Context, c *engine.Client, req Request) (int64, error) {
	task, err := req.Task("move")
	if err != nil {
		return 0, err
	}
	p, err := ParsePayload(task.Payload)
	if err != nil {
		return 0, spec.Invalidf("%v", err)
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
