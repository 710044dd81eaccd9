package cli

import (
	"errors"
	"regexp"
	"strconv"

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
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) {
		if want := flagValueWanted(invalid.GetFlag().Value.Type(), invalid.Unwrap()); want != "" {
			return Usage("--%s: %q %s", invalid.GetFlag().Name, invalid.GetValue(), want)
		}
	}
	return Usage("%v", err)
}

// flagValueWanted says what a flag of the parser's type takes, for a value it could not read:
// left to the parser, `--job abc` said "strconv.ParseInt: parsing "abc": invalid syntax".
func flagValueWanted(flagType string, cause error) string {
	switch flagType {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		if errors.Is(cause, strconv.ErrRange) {
			return "is out of range"
		}
		return "is not a whole number"
	case "duration":
		return "is not a duration such as 30s, 10m or 1h30m"
	case "bool":
		return "is not true or false"
	}
	return ""
}
