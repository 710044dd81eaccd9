package engine

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// refuseServerTwice refuses to register n (or to point it) at a server that another node of
// the group it will be in already reaches: a group is one primary and its standbys, and the
// same server under two names (a host name and its address, say) reads as two primaries, so
// that exports, moves and rebalances of the group are refused later, far from the mistake.
// Servers are told apart by what they say they are (nodeconn.Identity), not by conninfo. A
// standby of the group is another server, and a node re-added with a new conninfo for the
// same server (or a promoted standby no other node reaches) is not a second name. A server
// that does not answer is not judged: the node may be registered before it is up, and the
// leader's probe reports it.
func (c *Client) refuseServerTwice(ctx context.Context, n deckhandtype.Node) error {
	group, others, err := c.cat.GroupMembers(ctx, n.Name, n.Group)
	if err != nil {
		return err
	}
	if len(others) == 0 {
		return nil
	}
	id, err := nodeconn.Identify(ctx, n.DSN)
	if err != nil {
		return nil
	}
	// The members at once, a few at a time: asked in turn, members that accept connections
	// and never answer held the command for nodeconn.IdentifyTimeout each.
	ids := make([]*nodeconn.Identity, len(others))
	var g errgroup.Group
	g.SetLimit(checkParallelism)
	for i, m := range others {
		g.Go(func() error {
			if mid, err := nodeconn.Identify(ctx, m.DSN); err == nil {
				ids[i] = &mid
			}
			return nil
		})
	}
	g.Wait() //nolint:errcheck // each member's error is its own: it is not judged
	for i, m := range others {
		if ids[i] != nil && ids[i].Same(id) {
			return spec.Invalidf("node %s: its conninfo reaches the server that node %s of group %s already reaches (%s): a group is a primary and its standbys, each registered once; to change how %s is reached, node add %s with the new conninfo",
				n.Name, m.Name, group, id, m.Name, m.Name)
		}
	}
	return nil
}
