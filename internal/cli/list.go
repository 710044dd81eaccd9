package cli

import (
	"context"
	"slices"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/engine"
)

// listCommand is a command that reads something from the catalog and prints it: with -o json
// as fetch returned it, else as a table with the given columns and rows. fetch has a method
// expression's shape, so that (*engine.Client).Nodes fits as it is. The caller adds flags, and
// checks them in PreRunE, which runs before the catalog is opened.
func listCommand[V any](a *app, use, short string, fetch func(*engine.Client, context.Context) (V, error),
	columns []string, rows func(V) [][]string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			v, err := fetch(c, cmd.Context())
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, v)
			}
			return PrintTable(a.stdout, columns, rows(v))
		},
	}
}

// eachRow makes the rows of a table from a row per item.
func eachRow[T any](row func(T) []string) func([]T) [][]string {
	return func(items []T) [][]string {
		rows := make([][]string, 0, len(items))
		for _, it := range items {
			rows = append(rows, row(it))
		}
		return rows
	}
}

// checkFilter checks a list's --state and --limit. A misspelt state is refused, as it would
// silently list nothing.
func checkFilter[S ~string](what string, state S, states []S, limit int) error {
	if state != "" && !slices.Contains(states, state) {
		return Usage("--state: unknown %s state %q (want one of %v)", what, state, states)
	}
	if limit < 1 {
		return Usage("--limit must be at least 1, got %d", limit)
	}
	return nil
}
