package cli

import (
	"strconv"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/spf13/cobra"
)

func (a *app) nodeCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Register and list target PostgreSQL servers"}
	var n deckhandtype.Node
	add := &cobra.Command{
		Use:   "add NAME --dsn CONNINFO [--group G] [--max-tasks N]",
		Short: "Register a node (or update it)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n.DSN == "" {
				return Usage("--dsn is required")
			}
			if n.MaxTasks < 1 {
				return Usage("--max-tasks must be at least 1, got %d", n.MaxTasks)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			n.Name = args[0]
			// A registered node is updated: what the command is not given it keeps, rather than
			// taking the defaults (a standby re-added with a new limit stays in its group). The
			// catalog keeps them in the update itself, so that another admin's change made
			// meanwhile stays.
			put := n
			if !cmd.Flags().Changed("group") {
				put.Group = ""
			}
			if !cmd.Flags().Changed("max-tasks") {
				put.MaxTasks = 0
			}
			added, err := c.PutNode(cmd.Context(), put)
			if err != nil {
				return classify(err)
			}
			done := "updated"
			if added {
				done = "registered"
			}
			return a.done(map[string]any{"name": n.Name, "done": "add", "created": added}, "node "+n.Name+" "+done)
		},
	}
	add.Flags().StringVar(&n.DSN, "dsn", "", "conninfo of the node, without password")
	add.Flags().StringVar(&n.Group, "group", "", "node group: a primary and its standbys (default: the node's name; a registered node keeps its own)")
	add.Flags().IntVar(&n.MaxTasks, "max-tasks", 4, "most tasks running on this node at once (a registered node keeps its own)")

	list := listCommand(a, "list", "List nodes", (*engine.Client).Nodes,
		[]string{"name", "group", "role", "tasks", "dsn"}, eachRow(func(n deckhandtype.Node) []string {
			return []string{n.Name, n.Group, n.Role, strconv.FormatInt(n.RunningTasks, 10) + "/" + strconv.Itoa(n.MaxTasks), n.DSN}
		}))
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a node",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.RemoveNode(cmd.Context(), args[0]); err != nil {
				return classify(err)
			}
			return a.done(map[string]any{"name": args[0], "done": "remove"}, "node "+args[0]+" removed")
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error naming what is expected.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return Usage("expected %s, got %d argument(s)", names, len(args))
		}
		return nil
	}
}

// jobID parses a job id argument.
func jobID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, Usage("job id must be a positive integer, got %q", s)
	}
	return id, nil
}
