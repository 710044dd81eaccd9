package export

import (
	"context"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// followPrimary moves the coordinator to its group's primary when the catalog knows it to be
// another member than the node the coordinator was bound to at submission: after a failover
// (the old primary down, or back as a standby) the SHARE lock can only be held, and the
// consistency point only taken, on the new primary. Without it every attempt would go to the
// old node and fail, and the export with them. The attempt ends with a retryable error saying
// so; the next runs on the new primary and, as after any lost coordinator, plans a new epoch.
// A group whose primary the catalog does not know for certain (none recorded, or two that
// answer) keeps the node it has.
func (c Coordinator) followPrimary(ctx context.Context, t *deckhandtype.ClaimedTask, e *deckhandtype.Export) error {
	if t.Node == nil {
		return nil
	}
	nodes, err := c.Catalog.Nodes(ctx)
	if err != nil {
		return err
	}
	_, primaries := deckhandtype.Primaries(nodes, e.Group)
	if len(primaries) != 1 || primaries[0].Name == *t.Node {
		return nil
	}
	to := primaries[0].Name
	moved, err := c.Catalog.MoveExportCoordinator(ctx, t.ID, t.Token, to)
	if err != nil {
		return err
	}
	if !moved {
		return taskerr.Permanent(catalog.ErrStaleAttempt)
	}
	return fmt.Errorf("node %s is no longer the primary of group %s: the coordinator moves to %s, its primary now, and takes a new consistency point there", *t.Node, e.Group, to)
}
