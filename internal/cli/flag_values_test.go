package cli_test

import (
	"strings"
	"testing"
)

// serve and bench refuse flag values they cannot use, with exit 2 and one line, before they
// connect to anything: serve used to replace them with its defaults without a word (a
// --shutdown-grace of 0 became 30s, a --concurrency of -1 became 100), and bench --tasks -1
// panicked with a stack trace.
func TestServeAndBenchRefuseBadFlagValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		fragments []string
	}{
		{[]string{"serve", "--concurrency", "0"}, []string{"--concurrency must be at least 1, got 0"}},
		{[]string{"serve", "--concurrency", "-1"}, []string{"--concurrency must be at least 1, got -1"}},
		{[]string{"serve", "--lease", "0s"}, []string{"--lease must be positive, got 0s"}},
		{[]string{"serve", "--poll-interval", "-1s"}, []string{"--poll-interval must be positive, got -1s"}},
		{[]string{"serve", "--maintenance-interval", "0s"}, []string{"--maintenance-interval must be positive"}},
		{[]string{"serve", "--shutdown-grace", "0s"}, []string{"--shutdown-grace must be positive"}},
		{[]string{"serve", "--shutdown-record-timeout", "-5s"}, []string{"--shutdown-record-timeout must be positive"}},
		{[]string{"serve", "--progress-interval", "0s"}, []string{"--progress-interval must not be 0", "negative"}},
		{[]string{"serve", "--retry-backoff", "0s"}, []string{"--retry-backoff must be positive"}},
		{[]string{"serve", "--retry-backoff", "10s", "--retry-backoff-max", "1s"}, []string{"--retry-backoff-max", "at least --retry-backoff"}},
		{[]string{"serve", "--http", "127.0.0.1:0", "--http-max-sessions", "0"}, []string{"--http-max-sessions must be at least 1"}},
		{[]string{"serve", "--http", "127.0.0.1:0", "--http-session-idle", "0s"}, []string{"--http-session-idle must be positive"}},
		{[]string{"bench", "--tasks", "-1"}, []string{"--tasks must be at least 1, got -1"}},
		{[]string{"bench", "--sql-tasks", "-1"}, []string{"--sql-tasks must not be negative"}},
		{[]string{"bench", "--chain", "-1"}, []string{"--chain must not be negative"}},
		{[]string{"bench", "--finished", "-1"}, []string{"--finished must not be negative"}},
		{[]string{"bench", "--submit", "-1"}, []string{"--submit must not be negative"}},
		{[]string{"bench", "--pgbench", "-1s"}, []string{"--pgbench must not be negative"}},
		{[]string{"bench", "--node-max-tasks", "0"}, []string{"--node-max-tasks must be at least 1"}},
		{[]string{"bench", "export", "--rows", "0"}, []string{"--rows must be at least 1"}},
		{[]string{"bench", "export", "--parts", "0"}, []string{"--parts must be at least 1"}},
		{[]string{"bench", "export", "--workers", "-2"}, []string{"--workers must be at least 1"}},
		{[]string{"bench", "cleanup", "--rounds", "0"}, []string{"--rounds must be at least 1"}},
		{[]string{"bench", "cleanup", "--hold", "-1s"}, []string{"--hold must be positive"}},
	} {
		r := deckhand(t, "", append([]string{"--catalog", "host=/nonexistent"}, tc.args...)...)
		wantUsage(t, r, tc.fragments...)
	}
}

// A value the flag parser cannot read is refused saying what the flag takes, not with the
// parser's own error chain (`strconv.ParseInt: parsing "abc": invalid syntax`).
func TestUnreadableFlagValuesSayWhatTheFlagTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cleanup", "list", "--job", "abc"}, `--job: "abc" is not a whole number`},
		{[]string{"job", "list", "--limit", "99999999999999999999"}, `--limit: "99999999999999999999" is out of range`},
		{[]string{"job", "wait", "1", "--timeout", "abc"}, `--timeout: "abc" is not a duration such as 30s`},
		{[]string{"drop", "--node", "n1", "--wait=maybe", "t"}, `--wait: "maybe" is not true or false`},
	} {
		r := deckhand(t, "", append([]string{"--catalog", "host=/nonexistent"}, tc.args...)...)
		wantUsage(t, r, tc.want)
		if strings.Contains(r.stderr, "strconv") || strings.Contains(r.stderr, "invalid argument") {
			t.Errorf("%v: the parser's error shows through: %s", tc.args, r.stderr)
		}
	}
}
