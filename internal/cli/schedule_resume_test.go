package cli_test

import (
	"strings"
	"testing"
	"time"
)

// schedule resume prints the schedule's next run as the catalog holds it. Resuming a schedule
// that is not paused changes nothing, so the next run it prints is the one it had; it used
// to print one computed from now, which the schedule would never keep (an interval schedule
// resumed 2 s after its creation printed a next run 2 s later than its real one).
func TestScheduleResumePrintsTheStoredNextRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const spec = `{"tasks": [{"name": "p", "kind": "noop"}]}`
	want(t, e.runIn(spec, "schedule", "add", "hourly", "--every", "1h", "-"), 0)
	type next struct {
		NextRunAt *time.Time `json:"next_run_at"`
	}
	before := decode[next](t, e.run("schedule", "show", "hourly", "-o", "json"))
	time.Sleep(1100 * time.Millisecond) // so that a next run computed from now differs
	resumed := decode[next](t, e.run("schedule", "resume", "hourly", "-o", "json"))
	after := decode[next](t, e.run("schedule", "show", "hourly", "-o", "json"))
	if before.NextRunAt == nil || after.NextRunAt == nil || !after.NextRunAt.Equal(*before.NextRunAt) {
		t.Fatalf("resuming an active schedule moved its next run: %v, then %v", before.NextRunAt, after.NextRunAt)
	}
	if resumed.NextRunAt == nil || !resumed.NextRunAt.Equal(*after.NextRunAt) {
		t.Errorf("schedule resume -o json: next_run_at %v, but the schedule's is %v", resumed.NextRunAt, after.NextRunAt)
	}
	r := e.run("schedule", "resume", "hourly")
	if want(t, r, 0); !strings.Contains(r.stdout, after.NextRunAt.UTC().Format(time.RFC3339)) {
		t.Errorf("schedule resume: %q does not name the next run %s", r.stdout, after.NextRunAt.UTC().Format(time.RFC3339))
	}

	// Paused and resumed, it starts again from its next due time after now, and prints it.
	want(t, e.run("schedule", "pause", "hourly"), 0)
	resumed = decode[next](t, e.run("schedule", "resume", "hourly", "-o", "json"))
	after = decode[next](t, e.run("schedule", "show", "hourly", "-o", "json"))
	if resumed.NextRunAt == nil || after.NextRunAt == nil || !resumed.NextRunAt.Equal(*after.NextRunAt) {
		t.Errorf("resume of a paused schedule printed %v; the schedule's next run is %v", resumed.NextRunAt, after.NextRunAt)
	}
}
