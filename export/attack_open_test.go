//go:build attack

package export_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// Open finding, kept out of the default build (go test -tags attack ./export/ -run TestAttack).

// An export paused half-way (`job pause`, which lets running tasks finish): its parts are
// paused, but its coordinator runs on, waiting for them while holding the SHARE lock on the
// partition, so every writer of the partition waits for as long as the export stays paused
// (up to the coordinator's timeout), and the job stays "pausing". A paused job should hold
// nothing that blocks others: the coordinator should let go (as with --now) until the resume.
func TestAttackPausedExportHoldsBackWriters(t *testing.T) {
	g := newGroup(t, 1)
	g.env.Worker(engine.Config{Concurrency: 2})
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1",
		To: "file://" + t.TempDir(), PartSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := g.env.Client.Export(ctx, e.ID)
		return err == nil && got.PartsDone >= 1
	}, "a part is written")
	if _, err := g.env.Client.Pause(ctx, e.JobID, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the parts that ran at the pause end
	job, err := g.env.Client.Job(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, g.primary.DSN(g.db, pgcluster.Superuser))
	if _, err := conn.Exec(ctx, `SET lock_timeout = '3s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO events VALUES (-1, '2024-06-01', 1, 'w', '{}', 1)`); err != nil {
		t.Errorf("a write to the partition of export job %d, %s: %v", e.JobID, job.State, err)
	}
	if job.State != deckhandtype.JobPaused {
		t.Errorf("export job %d is %s three seconds after a pause", e.JobID, job.State)
	}
	if _, err := g.env.Client.Cancel(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
}
