package cli

import (
	"errors"
	"regexp"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// negativeNumber is an argument the flag parser takes for a cluster of short flags.
var negativeNumber = regexp.MustCompile(`^-[0-9][0-9.]*[a-zA-Zµ]*$`)

// flagError makes the flag parser's errors usage errors (exit 2). A negative number where an
// argument belongs (`deckhand job show -5`) reaches the parser as the short flags "5": left
// as "unknown shorthand flag: '5' in -5", the reason is hidden from whoever typed it.
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	if errors.As(err, &missing) && missing.GetSpecifiedShortnames() != "" {
		if arg := "-" + missing.GetSpecifiedShortnames(); negativeNumber.MatchString(arg) {
			return Usage(`%q is not a flag of %s, and IDs are positive integers: put an argument that starts with "-" after "--"`,
				arg, cmd.CommandPath())
		}
	}
	return Usage("%v", err)
}
