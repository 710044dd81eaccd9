package catalog

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// ProgressSample is a worker's latest reading of an attempt's progress; Progress nil clears
// what was recorded (the statement that reported it has ended).
type ProgressSample struct {
	TaskID, Token int64
	Progress      *deckhandtype.TaskProgress
}

// RecordProgress stores the samples of a worker's running attempts, in one statement. A
// sample of an attempt that is no longer running (it ended, or the task was handed to another
// worker) is dropped by the attempt-token guard.
func (c *Catalog) RecordProgress(ctx context.Context, samples []ProgressSample) error {
	if len(samples) == 0 {
		return nil
	}
	// Rows are locked in id order, the order every writer of tasks uses.
	samples = slices.SortedFunc(slices.Values(samples), func(a, b ProgressSample) int { return cmp.Compare(a.TaskID, b.TaskID) })
	ids := make([]int64, len(samples))
	tokens := make([]int64, len(samples))
	docs := make([]*string, len(samples))
	for i, s := range samples {
		ids[i], tokens[i] = s.TaskID, s.Token
		if s.Progress == nil {
			continue
		}
		doc, err := json.Marshal(struct {
			Token int64 `json:"token"`
			deckhandtype.TaskProgress
		}{s.Token, *s.Progress})
		if err != nil {
			return err
		}
		d := string(doc)
		docs[i] = &d
	}
	// A row that is locked is passed over, its sample dropped (the next one is recorded): a
	// caller of deckhand.pause or cancel may hold its job's rows for as long as it likes
	// (locks.go), and the other attempts' progress must not wait for them.
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.task t SET progress = u.doc::jsonb
		FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS u(id, token, doc)
		WHERE t.id = u.id AND t.attempt_token = u.token AND t.state`+isActive+`
		  AND t.progress IS DISTINCT FROM u.doc::jsonb
		  AND t.id IN (SELECT l.id FROM deckhand.task l WHERE l.id = ANY ($1::bigint[]) ORDER BY l.id FOR UPDATE SKIP LOCKED)`,
		ids, tokens, docs)
	if err != nil {
		return fmt.Errorf("record progress of %d tasks: %w", len(samples), err)
	}
	return nil
}

// TaskProgress reads the progress of those of the given tasks that are running and report
// one, as the caller may see them.
func (c *Catalog) TaskProgress(ctx context.Context, taskIDs []int64) (map[int64]*deckhandtype.TaskProgress, error) {
	out := map[int64]*deckhandtype.TaskProgress{}
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, coalesce(command, ''), coalesce(phase, ''), coalesce(done, 0), coalesce(total, 0),
			coalesce(unit, ''), sampled_at
		FROM deckhand.task_progress WHERE task_id = ANY ($1)`, taskIDs)
	var id int64
	var p deckhandtype.TaskProgress
	_, err := pgx.ForEachRow(rows, []any{&id, &p.Command, &p.Phase, &p.Done, &p.Total, &p.Unit, &p.SampledAt}, func() error {
		v := p
		out[id] = &v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read task progress: %w", err)
	}
	return out, nil
}

// JobProgress reads the progress of a job's running tasks that report one, by task id.
func (c *Catalog) JobProgress(ctx context.Context, jobID int64) ([]deckhandtype.NamedProgress, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, task_name, coalesce(command, ''), coalesce(phase, ''), coalesce(done, 0), coalesce(total, 0),
			coalesce(unit, ''), sampled_at
		FROM deckhand.task_progress WHERE job_id = $1 ORDER BY task_id LIMIT 100`, jobID)
	var out []deckhandtype.NamedProgress
	var n deckhandtype.NamedProgress
	_, err := pgx.ForEachRow(rows, []any{&n.TaskID, &n.Task, &n.Command, &n.Phase, &n.Done, &n.Total, &n.Unit, &n.SampledAt}, func() error {
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the progress of job %d: %w", jobID, err)
	}
	return out, nil
}
