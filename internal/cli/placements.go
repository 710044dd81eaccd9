package cli

import (
	"context"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
)

// placementsCommand lists where each tenant schema (or table placed on its own) lives, and
// what is moving it: what deckhand.placements shows, for people and (with -o json) routers.
func (a *app) placementsCommand() *cobra.Command {
	fetch := func(c *engine.Client, ctx context.Context) ([]deckhandtype.Placement, error) {
		return c.Catalog().Placements(ctx)
	}
	cmd := listCommand(a, "placements", "List which node group holds each schema or table, and the moves under way", fetch,
		[]string{"schema", "table", "group", "since", "placed by", "moving"}, eachRow(func(p deckhandtype.Placement) []string {
			table, placedBy, moving := "*", "-", "-"
			if p.Table != nil {
				table = *p.Table
			}
			if p.JobID != nil {
				placedBy = "job " + strconv.FormatInt(*p.JobID, 10)
			}
			if p.MovingJobID != nil && p.MovingTo != nil {
				moving = "to " + *p.MovingTo + " by job " + strconv.FormatInt(*p.MovingJobID, 10)
			}
			return []string{p.Schema, table, p.Group, p.Since.UTC().Format(time.RFC3339), placedBy, moving}
		}))
	cmd.Long = `List the placements of the catalog (view deckhand.placements): the node group that holds each
tenant schema, or a table placed apart from its schema (TABLE * is the whole schema), since when,
the move that put it there, and the move under way of it, if any. Only a move's switch records
a placement: a schema deckhand never moved has none, nor has one whose moves all failed or were
cancelled. A move under way of a schema without a placement is not listed here (it is no
placement until it switches): see view deckhand.placement_moves, or deckhand job list.`
	return cmd
}
