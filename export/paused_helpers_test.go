package export_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// The tests of an export of a group whose servers change under it (a pause, a failover, a
// second primary) start an export of events_2024 in small parts, hold it half-way, and check
// what it committed once resumed.

// aPartWritten starts an export of events_2024 in parts of 64 KiB to a new directory
// (maxAttempts: 0 for the default) and waits until one part is written. It returns the export
// and the directory.
func aPartWritten(t *testing.T, g *group, maxAttempts int) (*deckhandtype.Export, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1",
		To: "file://" + dir, PartSize: 64 << 10, MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := g.env.Client.Export(ctx, e.ID)
		return err == nil && got.PartsDone >= 1
	}, "a part is written")
	return e, dir
}

// pausedAfterAPart starts an export of events_2024 to a new directory (maxAttempts: 0 for the
// default), waits until a part is written, then pauses its job at once and waits until it is
// paused. It returns the export and the directory.
func pausedAfterAPart(t *testing.T, g *group, maxAttempts int) (*deckhandtype.Export, string) {
	t.Helper()
	e, dir := aPartWritten(t, g, maxAttempts)
	if _, err := g.env.Client.Pause(ctx, e.JobID, true); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		job, err := g.env.Client.JobRow(ctx, e.JobID)
		return err == nil && job.State == deckhandtype.JobPaused
	}, "the export's job is paused")
	return e, dir
}

// everyRowOnce checks that the export committed in dir holds every row of events_2024 on the
// group's standby, the primary after a failover, each once.
func everyRowOnce(t *testing.T, g *group, dir string) {
	t.Helper()
	rows, _, dups := readBack(t, dir, readManifest(t, dir))
	want, _ := sourceSums(t, g.standby, g.db, "events_2024")
	if rows != want || dups != 0 {
		t.Errorf("%d rows (%d twice), want %d once each", rows, dups, want)
	}
}

// failsSayingOrCommitsThePointsRows waits for the resumed export's job: it either fails with
// an error containing fragment (which says why), or commits exactly the rows of events_2024
// on the primary that holds the consistency point.
func failsSayingOrCommitsThePointsRows(t *testing.T, g *group, e *deckhandtype.Export, dir, fragment, why string) {
	t.Helper()
	job := g.env.Wait(e.JobID, time.Minute)
	switch job.State {
	case deckhandtype.JobFailed:
		msg := lastError(t, g, e.JobID)
		t.Logf("the export failed: %.300s", msg)
		if !strings.Contains(msg, fragment) {
			t.Errorf("export failed with %q, want it to say %s", msg, why)
		}
	case deckhandtype.JobFinished:
		rows, _, _ := readBack(t, dir, readManifest(t, dir))
		if want, _ := sourceSums(t, g.primary, g.db, "events_2024"); rows != want {
			t.Errorf("the export committed %d rows, want the %d of the primary holding the point", rows, want)
		}
	default:
		t.Fatalf("export job %s", job.State)
	}
}
