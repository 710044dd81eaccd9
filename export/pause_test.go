package export_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// An export paused half-way (`job pause`, which lets running tasks finish) holds nothing that
// blocks others: once the parts that ran at the pause have ended, its coordinator is released
// too (uncharged), and its lock with it, so the job is paused and the partition's writers go
// on. After the resume the export takes a new consistency point and commits exactly the rows
// the partition has then, a write made during the pause included.
func TestPausedExportReleasesThePartition(t *testing.T) {
	g := newGroup(t, 1)
	g.env.Worker(engine.Config{Concurrency: 2})
	e, dir := aPartWritten(t, g, 0)
	if _, err := g.env.Client.Pause(ctx, e.JobID, false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		job, err := g.env.Client.JobRow(ctx, e.JobID)
		return err == nil && job.State == deckhandtype.JobPaused
	}, "the paused export's job is paused")
	paused, err := g.env.Client.Export(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.State != deckhandtype.ExportPaused || paused.PartsDone >= paused.PartsTotal {
		t.Fatalf("export %+v; want one paused half-way", paused)
	}
	d, err := g.env.Client.Job(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	coordinator := d.Tasks[0]
	if coordinator.Kind != export.KindCoordinator || coordinator.State != deckhandtype.TaskPaused {
		// The paused parts are most of them: they are counted, the others named, so that the
		// line stays short enough to be read whole in a CI log.
		var tasks, attempts []string
		pausedTasks := 0
		for _, task := range d.Tasks {
			if task.State == deckhandtype.TaskPaused {
				pausedTasks++
				continue
			}
			tasks = append(tasks, fmt.Sprintf("%s=%s", task.Name, task.State))
		}
		for _, a := range d.Attempts {
			attempts = append(attempts, fmt.Sprintf("%s#%d=%s", a.TaskName, a.Attempt, a.Outcome))
		}
		t.Fatalf("task %s (%s) is %s; want the coordinator paused (job %s; attempts %v; %d tasks paused, the others %v)",
			coordinator.Name, coordinator.Kind, coordinator.State, d.State, attempts, pausedTasks, tasks)
	}
	released := 0
	for _, a := range d.Attempts {
		if a.TaskID == coordinator.ID && a.Outcome == deckhandtype.OutcomeReleased {
			released++
		}
	}
	if released != 1 {
		t.Fatalf("the coordinator has %d released attempts (%+v); want 1", released, d.Attempts)
	}

	// A writer of the partition is not held back: its lock is granted at once.
	writer := pgtest.Connect(t, g.primary.DSN(g.db, pgcluster.Superuser))
	err = pgx.BeginFunc(ctx, writer, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE ONLY events_2024 IN ROW EXCLUSIVE MODE NOWAIT`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO events_2024 VALUES (-1, '2024-06-01', 1, 'while paused', '{}', 1)`)
		return err
	})
	if err != nil {
		t.Fatalf("a write to the partition of the paused export: %v", err)
	}

	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	m := readManifest(t, dir)
	wantRows, wantSum := sourceSums(t, g.primary, g.db, "events_2024")
	rows, idSum, dups := readBack(t, dir, m)
	if rows != wantRows || idSum != wantSum || dups != 0 || m.TotalRows != wantRows {
		t.Fatalf("read back %d rows (sum %d, %d dups), manifest %d; want the %d rows (sum %d) after the write",
			rows, idSum, dups, m.TotalRows, wantRows, wantSum)
	}
	got, err := g.env.Client.Export(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != deckhandtype.ExportCommitted || got.Epoch <= paused.Epoch {
		t.Fatalf("export %s in epoch %d; want committed in an epoch after %d", got.State, got.Epoch, paused.Epoch)
	}
	// What the earlier epoch's parts met (superseded by the new consistency point) is not an
	// error of the committed export.
	if len(got.Errors) != 0 {
		t.Errorf("the committed export lists errors %q", got.Errors)
	}
	if d, err = g.env.Client.Job(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	if d.Tasks[0].Attempts != 1 {
		t.Errorf("the coordinator was charged %d attempts; want 1 (the release is not charged)", d.Tasks[0].Attempts)
	}
}
