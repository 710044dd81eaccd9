package cli_test

import "testing"

// A negative number where an ID belongs is read by the flag parser as a cluster of short
// flags ("-5"): the error says so in words a script's author understands, with the way to
// pass an argument that starts with "-", instead of "unknown shorthand flag: '5' in -5".
// No catalog is needed: the flags are parsed before anything connects.
func TestNegativeNumberArgument(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"job", "show", "-5"},
		{"job", "cancel", "-12"},
		{"job", "wait", "-1", "--timeout", "1s"},
		{"cleanup", "unpin", "-1"},
		{"cleanup", "retry", "-3"},
	} {
		r := deckhand(t, "", append([]string{"--catalog", "host=/nonexistent"}, args...)...)
		wantUsage(t, r, `"`+args[2]+`" is not a flag`, "IDs are positive", "--")
	}
	// A value that starts with "-" goes after "--": it then reaches the argument's own check.
	r := deckhand(t, "", "--catalog", "host=/nonexistent", "job", "show", "--", "-5")
	wantUsage(t, r, `job id must be a positive integer, got "-5"`)
	// Unknown flags that are not numbers keep the parser's message.
	wantUsage(t, deckhand(t, "", "job", "show", "-x", "1"), "unknown shorthand flag")
	wantUsage(t, deckhand(t, "", "job", "show", "--bogus", "1"), "unknown flag: --bogus")
}
