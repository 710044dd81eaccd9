package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// builtinCommands adds cobra's help and completion commands now rather than when the command
// line runs, so that groupCommands gives them deckhand's usage errors too: left alone,
// `deckhand completion tcsh` printed help and exited 0, and `deckhand help bogus` printed the
// root's help and exited 0, which a script takes for success.
func builtinCommands(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, cmd := range root.Commands() {
		if cmd.Name() != "help" || cmd.Run == nil {
			continue
		}
		run := cmd.Run
		cmd.Run = nil
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			// Find stops at the last command it knows and returns the rest as arguments.
			if _, rest, err := cmd.Root().Find(args); err != nil || len(rest) > 0 {
				return Usage("unknown help topic %q; see `%s --help`", strings.Join(args, " "), cmd.Root().Name())
			}
			run(cmd, args)
			return nil
		}
	}
}
