package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// Stats counts jobs and tasks by state without reading deckhand.task beyond its partial
// indexes: ended tasks are summed from the job counters (one pass over deckhand.job, which
// has one row per job instead of one per task), runnable, paused and running tasks come from their
// partial indexes, and blocked tasks are what the counters leave pending minus those.
func (c *Catalog) Stats(ctx context.Context) (deckhandtype.Stats, error) {
	start := time.Now()
	var byState []byte
	var runnable, paused, running, cancelling, workers, cleanupPending, cleanupDue, exportRows, exportBytes int64
	var leader *int64
	var readAt time.Time
	err := c.Pool.QueryRow(ctx, `
		WITH j AS (
			-- Done counts not folded into their jobs' rows yet are in the tallies.
			SELECT state, count(*) AS jobs, sum(tasks_done + coalesce(y.done, 0)) AS done, sum(tasks_failed) AS failed,
				sum(tasks_cancelled) AS cancelled, sum(tasks_unscheduled) AS unscheduled,
				sum(tasks_total - tasks_done - coalesce(y.done, 0) - tasks_failed - tasks_cancelled - tasks_unscheduled) AS pending
			FROM deckhand.job
			LEFT JOIN (SELECT t.job_id, sum(t.done) AS done FROM deckhand.job_tally t GROUP BY t.job_id) y ON y.job_id = job.id
			GROUP BY state
		)
		SELECT (SELECT coalesce(jsonb_object_agg(state, jsonb_build_array(jobs, done, failed, cancelled, unscheduled, pending)), '{}') FROM j),
			-- Runnable tasks by the sets that have indexes of their own (see claim.go).
			(SELECT count(*) FROM deckhand.task WHERE state = 'runnable' AND node IS NULL AND node_group IS NULL)
			+ (SELECT count(*) FROM deckhand.task WHERE state = 'runnable' AND node_group IS NULL AND node IS NOT NULL AND kind <> 'export')
			+ (SELECT count(*) FROM deckhand.task WHERE state = 'runnable' AND node_group IS NULL AND kind = 'export')
			+ (SELECT count(*) FROM deckhand.task WHERE state = 'runnable' AND node_group IS NOT NULL),
			(SELECT count(*) FROM deckhand.task WHERE state = 'paused'),
			(SELECT count(*) FROM deckhand.task WHERE state = 'running'),
			(SELECT count(*) FROM deckhand.task WHERE state = 'cancelling'),
			(SELECT count(*) FROM deckhand.worker WHERE stopped_at IS NULL AND lease_expires_at > coalesce($1, now())),
			(SELECT worker_id FROM deckhand.leader WHERE lease_expires_at > coalesce($1, now())),
			coalesce($1, now()),
			(SELECT count(*) FROM deckhand.cleanup_record WHERE state = 'pending'),
			(SELECT count(*) FROM deckhand.cleanup_record WHERE state = 'due'),
			(SELECT coalesce(sum(p.rows), 0) FROM deckhand.export_part p JOIN deckhand.export e ON e.id = p.export_id
			  WHERE p.epoch = e.epoch AND p.finished_at IS NOT NULL AND e.state <> 'superseded'),
			(SELECT coalesce(sum(p.bytes), 0) FROM deckhand.export_part p JOIN deckhand.export e ON e.id = p.export_id
			  WHERE p.epoch = e.epoch AND p.finished_at IS NOT NULL AND e.state <> 'superseded')`,
		c.now()).Scan(&byState, &runnable, &paused, &running, &cancelling, &workers, &leader, &readAt,
		&cleanupPending, &cleanupDue, &exportRows, &exportBytes)
	if err != nil {
		return deckhandtype.Stats{}, fmt.Errorf("read catalog stats: %w", err)
	}
	var agg map[deckhandtype.JobState][6]int64
	if err := json.Unmarshal(byState, &agg); err != nil {
		return deckhandtype.Stats{}, fmt.Errorf("read catalog stats: %w", err)
	}
	s := deckhandtype.Stats{Jobs: map[deckhandtype.JobState]int64{}, Tasks: map[deckhandtype.TaskState]int64{}, WorkersAlive: workers, ReadAt: readAt,
		CleanupBacklog: map[deckhandtype.CleanupState]int64{deckhandtype.CleanupPending: cleanupPending, deckhandtype.CleanupDue: cleanupDue},
		ExportRows:     exportRows, ExportBytes: exportBytes}
	for _, st := range deckhandtype.JobStates {
		s.Jobs[st] = 0
	}
	for _, st := range deckhandtype.TaskStates {
		s.Tasks[st] = 0
	}
	var pending int64
	for state, a := range agg {
		s.Jobs[state] = a[0]
		s.Tasks[deckhandtype.TaskDone] += a[1]
		s.Tasks[deckhandtype.TaskFailed] += a[2]
		s.Tasks[deckhandtype.TaskCancelled] += a[3]
		s.Tasks[deckhandtype.TaskUnscheduled] += a[4]
		pending += a[5]
	}
	s.Tasks[deckhandtype.TaskRunnable] = runnable
	s.Tasks[deckhandtype.TaskPaused] = paused
	s.Tasks[deckhandtype.TaskRunning] = running
	s.Tasks[deckhandtype.TaskCancelling] = cancelling
	// Never negative, should a writer ever let a counter drift from the task rows.
	s.Tasks[deckhandtype.TaskBlocked] = max(0, pending-runnable-paused-running-cancelling)
	if leader != nil {
		s.LeaderID = *leader
	}
	s.Took = time.Since(start)
	return s, nil
}

// Jobs lists jobs newest first, walking an index from the cursor: the primary key without a
// state filter, (state, id) with one. A page therefore costs the same on a catalog of a
// hundred jobs or of millions, whichever state is asked for and however deep the cursor.
func (c *Catalog) Jobs(ctx context.Context, f deckhandtype.JobFilter) ([]deckhandtype.Job, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	before := f.BeforeID
	if before <= 0 {
		before = math.MaxInt64
	}
	var rows pgx.Rows
	if f.State == "" {
		rows, _ = c.Pool.Query(ctx, `SELECT `+jobColumns+` FROM deckhand.jobs
			WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, f.Limit)
	} else {
		// Planned for the values given, not generically: walking (state, id) is right for a
		// rare state, walking the primary key can be as good for a common one, and a generic
		// plan, blind to the state's frequency, may walk the primary key through every job
		// looking for a rare one.
		rows, _ = c.Pool.Query(ctx, `SELECT `+jobColumns+` FROM deckhand.jobs
			WHERE state = $1 AND id < $2 ORDER BY id DESC LIMIT $3`,
			pgx.QueryExecModeSimpleProtocol, f.State, before, f.Limit)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Job])
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}
