package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task chooses the size of its own error: RAISE with a string of hundreds of megabytes. The
// catalog cannot keep such a string in jsonb (256 MB at most), and a worker that retried that
// result for ever would hold back every other result it has, other users' included. The error
// is kept clipped to catalog.MaxErrorText, and the worker goes on. An error of 8 MB shows the
// clip (unclipped, it would be stored whole and fail the length check) at a fraction of the
// CPU a 270 MB one costs the server and the race detector.
func TestHugeErrorIsClippedAndTheWorkerGoesOn(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	// Reading a large error is slow under the race detector: a lease longer than the tests'
	// usual 2 s keeps the leader from declaring the worker dead meanwhile (which would record a
	// lost attempt instead of the error this test is about).
	e.Worker(engine.Config{Concurrency: 2, LeaseTTL: 30 * time.Second})
	huge := submit(t, e, &spec.Job{
		// Keeps the message out of the shared test cluster's log.
		Settings: map[string]string{"log_min_messages": "panic", "log_min_error_statement": "panic"},
		Tasks: []spec.Task{{Name: "huge", Node: "n1", MaxAttempts: 1,
			SQL: `DO $$BEGIN RAISE EXCEPTION '%', repeat('x', 8000000); END$$`}}})
	if job := e.Wait(huge, 90*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s: %s", job.State, explain(detail(t, e, huge)))
	}
	d := detail(t, e, huge)
	msg := d.Tasks[0].LastError
	if msg == nil || !strings.HasPrefix(msg.Message, "xxxx") || len(msg.Message) > 64<<10 {
		n := -1
		if msg != nil {
			n = len(msg.Message)
		}
		t.Errorf("task error of %d bytes: want the message clipped", n)
	}
	next := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "next", Node: "n1", SQL: "SELECT 1"}}})
	if job := e.Wait(next, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("next job %s: %s", job.State, explain(detail(t, e, next)))
	}
}
