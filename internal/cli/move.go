package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/move"
)

func (a *app) moveCommand() *cobra.Command {
	var r move.Request
	cmd := &cobra.Command{
		Use:   "move (--schema S | --table T...) --from G1 --to G2",
		Short: "Move a schema or tables online from one node group's primary to another's; prints the job id",
		Long: `move copies a schema (or tables) from the primary of node group --from to the primary of
--to while the application keeps writing: the structure with pg_dump (run by the worker as the
owner), the rows under a replication slot's snapshot, tables in parallel, then the changes
made since, applied from the slot. The cut-over blocks writes on the source for at most
--max-write-block (reads go on), retrying later if the target cannot catch up in time, then
switches the placement (deckhand placements) and makes the source refuse writes with
"relation moved to group G2 by job N". The source is dropped once no query uses it.

Needs: wal_level = logical on the source; an owner (default: you) that owns the objects and
has REPLICATION on the source and CREATE on both databases (the target's for the objects, the
source's for the move's publication); no superuser. Every
table needs a primary key (or a replica identity index). See docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The request reads 0 as "the default": a --max-write-block of 0 (or less) given
			// here would silently block writers for the default 2s instead.
			if r.MaxWriteBlock <= 0 {
				return Usage("--max-write-block must be positive, got %s", r.MaxWriteBlock)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := move.Start(cmd.Context(), c, r)
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, map[string]any{"job_id": id, "description": r.Describe()})
			}
			fmt.Fprintln(a.stdout, id)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Schema, "schema", "", "the schema to move, with everything in it")
	f.StringSliceVar(&r.Tables, "table", nil, "a table to move (schema.table; repeat or separate with commas)")
	f.StringVar(&r.From, "from", "", "node group the objects are on (its primary is used)")
	f.StringVar(&r.To, "to", "", "node group to move them to (its primary is used)")
	f.StringVar(&r.Owner, "owner", "", "role the move runs as on both nodes (default: you)")
	f.DurationVar(&r.MaxWriteBlock, "max-write-block", move.DefaultMaxWriteBlock, "longest time the cut-over may block writers")
	return cmd
}
