package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/executor"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/spec"
)

// Export starts an export of a partition (see package export). It normalizes and checks the
// request, finds the group's primary and checks there that the submitter may act as the owner
// (for a clear refusal: the workers check again on every node before anything runs). The
// catalog's deckhand.submit_export then decides where the submitter may write, and refuses a
// destination that already has an export unless req.Force.
func (c *Client) Export(ctx context.Context, req export.Request) (*deckhandtype.Export, error) {
	if err := req.Normalize(); err != nil {
		return nil, err
	}
	primary, err := c.groupPrimary(ctx, req.Group)
	if err != nil {
		return nil, err
	}
	var submitter string
	if err := c.Catalog.Pool.QueryRow(ctx, `SELECT session_user`).Scan(&submitter); err != nil {
		return nil, err
	}
	owner := req.Owner
	if owner == "" {
		owner = submitter
	}
	// The same checks as any task on the primary: the owner exists, the submitter is a member.
	check := &spec.Job{Tasks: []spec.Task{{Name: "coordinator", Kind: spec.KindSQL, Node: primary, Owner: owner, SQL: "-"}}}
	if err := c.authorize(ctx, check, submitter); err != nil {
		return nil, err
	}
	exportID, _, err := c.Catalog.CreateExport(ctx, req.Record(primary, owner))
	if errors.Is(err, catalog.ErrExportExists) {
		return nil, invalid("%v", err)
	}
	if err != nil {
		return nil, err
	}
	return c.Catalog.Export(ctx, exportID)
}

// groupPrimary finds the primary of a node group, probing the members when the leader has not
// recorded their roles yet.
func (c *Client) groupPrimary(ctx context.Context, group string) (string, error) {
	nodes, err := c.Catalog.Nodes(ctx)
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
		return "", invalid("node group %q has no nodes (see `deckhand node list`)", group)
	}
	pools := executor.NewPools(1)
	defer pools.Close()
	var primaries []string
	for _, n := range members {
		role := n.Role
		if role == "unknown" {
			if role, _, err = executor.Probe(ctx, pools, n.DSN); err != nil {
				return "", fmt.Errorf("node %s of group %s: %w", n.Name, group, err)
			}
		}
		if role == "primary" {
			primaries = append(primaries, n.Name)
		}
	}
	switch len(primaries) {
	case 0:
		return "", invalid("node group %q has no primary", group)
	case 1:
		return primaries[0], nil
	default:
		return "", invalid("node group %q has %d primaries (%v): a group is one primary and its standbys", group, len(primaries), primaries)
	}
}
