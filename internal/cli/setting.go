package cli

import (
	"fmt"
	"maps"
	"slices"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/suggest"
	"github.com/spf13/cobra"
)

// knownSettings are the catalog-wide settings deckhand reads, with what each does; any other
// name is accepted too, for settings of programs that embed deckhand.
var knownSettings = map[string]string{
	"retention":             "how long ended jobs are kept (Go duration, default 168h)",
	"max_running_tasks":     "most tasks running at once across all workers (0: no limit)",
	"cleanup_lock_timeout":  "how long a drop may make others queue behind its lock (default 100ms)",
	"export_destinations":   "comma-separated URL prefixes submitters may export to (admins: anywhere)",
	"api_max_event_streams": "most live event streams one API server serves (default 100)",
}

func (a *app) settingCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "setting", Short: "Show and change catalog-wide settings (admins)"}
	list := listCommand(a, "list", "List the settings that are set, and the known ones", (*engine.Client).Settings,
		[]string{"name", "value", "meaning"}, settingRows)
	set := &cobra.Command{
		Use:   "set NAME VALUE",
		Short: "Set a setting",
		Args:  exactArgs(2, "NAME VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] == "" {
				return Usage("VALUE is empty: use `deckhand setting reset %s` to go back to the default", args[0])
			}
			return a.changeSetting(cmd, args[0], args[1])
		},
	}
	reset := &cobra.Command{
		Use:   "reset NAME",
		Short: "Remove a setting: deckhand goes back to its default",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.changeSetting(cmd, args[0], "")
		},
	}
	cmd.AddCommand(list, set, reset)
	return cmd
}

// settingRows are the settings that are set, by name, then the known ones left at their default.
func settingRows(set map[string]string) [][]string {
	names := slices.Sorted(maps.Keys(set))
	for _, k := range slices.Sorted(maps.Keys(knownSettings)) {
		if _, ok := set[k]; !ok {
			names = append(names, k)
		}
	}
	rows := make([][]string, 0, len(names))
	for _, name := range names {
		value, ok := set[name]
		if !ok {
			value = "(default)"
		}
		rows = append(rows, []string{name, value, knownSettings[name]})
	}
	return rows
}

func (a *app) changeSetting(cmd *cobra.Command, name, value string) error {
	c, err := a.client(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetSetting(cmd.Context(), name, value); err != nil {
		return classify(err)
	}
	if _, known := knownSettings[name]; !known && value != "" {
		// Stored all the same (programs that embed deckhand keep settings of their own here),
		// but a misspelt name would otherwise change nothing without a word.
		fmt.Fprintf(a.stderr, "deckhand: note: %s is not a setting deckhand reads; it is stored for programs that read it%s\n",
			name, closestSetting(name))
	}
	if value == "" {
		return a.done(map[string]any{"name": name, "done": "reset", "value": nil}, "setting "+name+" reset to its default")
	}
	return a.done(map[string]any{"name": name, "done": "set", "value": value}, "setting "+name+" set")
}

// closestSetting suggests the known setting a mistyped name was most likely meant to be.
func closestSetting(name string) string {
	if best := suggest.Closest(name, slices.Sorted(maps.Keys(knownSettings))); best != "" {
		return " (did you mean " + best + "?)"
	}
	return ""
}
