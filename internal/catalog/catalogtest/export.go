package catalogtest

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// ExportOpts describes an export and its job.
type ExportOpts struct {
	State deckhandtype.ExportState // planning when empty
	Epoch int                      // 0 for a planning export, 1 for others, when zero
	// Coordinator is the state of the job's coordinator task; running when empty.
	Coordinator deckhandtype.TaskState
	// Parts are the states of part tasks the coordinator added in Epoch.
	Parts       []deckhandtype.TaskState
	Destination string // a unique file:// URL when empty
}

// ExportRow is an inserted export.
type ExportRow struct {
	ID          int64
	Job         JobRow // its coordinator is Tasks[0], its parts follow
	Epoch       int
	Destination string
}

// Coordinator is the export's coordinator task.
func (e ExportRow) Coordinator() TaskRow { return e.Job.Tasks[0] }

// Export inserts an export, its job, the job's coordinator and parts. Unless it is
// planning, the coordinator's attempt holds its consistency point (coordinator_token).
func Export(ctx context.Context, tb testing.TB, db DB, opts *ExportOpts) ExportRow {
	tb.Helper()
	o := *opts
	if o.State == "" {
		o.State = deckhandtype.ExportPlanning
	}
	if o.Epoch == 0 && o.State != deckhandtype.ExportPlanning {
		o.Epoch = 1
	}
	if o.Coordinator == "" {
		o.Coordinator = deckhandtype.TaskRunning
	}
	if o.Destination == "" {
		o.Destination = "file:///exports/" + unique("e")
	}
	tasks := []TaskOpts{{Name: "coordinator", Kind: "export", State: o.Coordinator}}
	for i, s := range o.Parts {
		tasks = append(tasks, TaskOpts{Name: catalog.PartTaskPrefix(o.Epoch) + strconv.Itoa(i), Kind: "export_part",
			State: s, AddedBy: "coordinator"})
	}
	row := ExportRow{Job: Job(ctx, tb, db, &JobOpts{Kind: "export", Tasks: tasks}), Epoch: o.Epoch, Destination: o.Destination}
	var token *int64
	if o.State != deckhandtype.ExportPlanning && row.Coordinator().Token != 0 {
		token = &row.Job.Tasks[0].Token
	}
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.export (job_id, source_table, partition, node_group, destination, compression, part_size,
			state, epoch, coordinator_token, parts_total, planned_at, finished_at)
		VALUES (@job, 'public.t', 'public.t_1', 'g', @destination, 'zstd', 134217728, @state, @epoch, @token, @parts,
			CASE WHEN @state <> 'planning' THEN now() END, CASE WHEN @state IN ('committed', 'superseded') THEN now() END)
		RETURNING id`,
		pgx.StrictNamedArgs{"job": row.Job.ID, "destination": o.Destination, "state": o.State, "epoch": o.Epoch,
			"token": token, "parts": len(o.Parts)}).Scan(&row.ID)
	if err != nil {
		tb.Fatalf("catalogtest: insert export: %v", err)
	}
	return row
}
