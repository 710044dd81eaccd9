package export

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Start starts an export of a partition. It normalizes and checks the request, finds the
// group's primary and checks there that the submitter may act as the owner (for a clear
// refusal: the workers check again on every node before anything runs). The catalog's
// deckhand.submit_export then decides where the submitter may write, and refuses a
// destination that already has an export unless req.Force.
func Start(ctx context.Context, c *engine.Client, req Request) (*deckhandtype.Export, error) {
	if err := req.Normalize(); err != nil {
		return nil, err
	}
	primary, err := groupPrimary(ctx, c, req.Group)
	if err != nil {
		return nil, err
	}
	submitter, err := c.Submitter(ctx)
	if err != nil {
		return nil, err
	}
	owner := req.Owner
	if owner == "" {
		owner = submitter
	}
	if err := c.CheckOwner(ctx, primary, owner, submitter); err != nil {
		return nil, err
	}
	exportID, _, err := c.Catalog().CreateExport(ctx, req.Record(primary, owner))
	if errors.Is(err, catalog.ErrExportExists) {
		return nil, spec.Invalidf("%v", err)
	}
	if err != nil {
		return nil, err
	}
	return c.Export(ctx, exportID)
}

// groupPrimary finds the primary of a node group, probing the members when the leader has not
// recorded their roles yet.
func groupPrimary(ctx context.Context, c *engine.Client, group string) (string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	var members []deckhandtype.Node
	for _, n := range nodes {
		if n.Group == group {
			members = append(members, n)
		}
	}
	if len(members) == 0 {
		return "", spec.Invalidf("node group %q has no nodes (see `deckhand node list`)", group)
	}
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	var primaries []string
	for _, n := range members {
		role := n.Role
		if role == "unknown" {
			if role, _, err = nodeconn.Probe(ctx, pools, n.DSN); err != nil {
				return "", fmt.Errorf("node %s of group %s: %w", n.Name, group, err)
			}
		}
		if role == "primary" {
			primaries = append(primaries, n.Name)
		}
	}
	switch len(primaries) {
	case 0:
		return "", spec.Invalidf("node group %q has no primary", group)
	case 1:
		return primaries[0], nil
	default:
		return "", spec.Invalidf("node group %q has %d primaries (%v): a group is one primary and its standbys", group, len(primaries), primaries)
	}
}
