package export_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
)

// Every node of an export's group removed while the export is paused: its coordinator has no
// primary to follow and fails, and its parts, bound to a group with no node left, fail too,
// rather than wait for ever and keep the job from ending.
func TestExportOfARemovedGroupEnds(t *testing.T) {
	g := newGroup(t, 1)
	g.env.Worker(engine.Config{Concurrency: 2, MaintenanceInterval: 50 * time.Millisecond})
	e, _ := pausedAfterAPart(t, g, 0)
	for _, n := range []string{"p1", "s1"} {
		if err := g.env.Client.RemoveNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	if job := g.env.Wait(e.JobID, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("the export of a removed group: job %s, want failed", job.State)
	}
}
