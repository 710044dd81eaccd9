package cli_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/cli"
)

// A job that has already ended is reported as ended, however short the --timeout: the
// deadline that struck before the first read does not turn a finished job into exit 3.
func TestWaitOnAnEndedJobIgnoresTheTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.worker()

	ok := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	want(t, e.run("job", "wait", ok, "--timeout", "20s"), 0)
	bad := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1/0"))
	want(t, e.run("job", "wait", bad, "--timeout", "20s"), cli.ExitFailed)

	for _, timeout := range []string{"1ns", "1ms"} {
		r := e.run("job", "wait", ok, "--timeout", timeout)
		want(t, r, 0)
		if !strings.Contains(r.stderr, "job "+ok+" finished") || strings.Contains(r.stderr, "timed out") {
			t.Errorf("job wait --timeout %s on a finished job: %s", timeout, r)
		}
		r = e.run("job", "wait", bad, "--timeout", timeout)
		want(t, r, cli.ExitFailed)
		if !strings.Contains(r.stderr, "job "+bad+" failed") || strings.Contains(r.stderr, "timed out") {
			t.Errorf("job wait --timeout %s on a failed job: %s", timeout, r)
		}
	}
	// A job that has not ended still times out (exit 3).
	slow := jobID(t, e.run("job", "run", "--node", "n1", "SELECT pg_sleep(30)"))
	r := e.run("job", "wait", slow, "--timeout", "1ms")
	want(t, r, cli.ExitTimeout)
	want(t, e.run("job", "cancel", slow), 0)
}
