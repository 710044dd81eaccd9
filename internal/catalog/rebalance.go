package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// rebalanceKind is the kind of the jobs of rebalances (rebalance.JobKind).
const rebalanceKind = "rebalance"

// UnfinishedRebalance returns the id of the caller's own unfinished rebalance job, or 0. Only
// the caller's own count: a job's kind is a label any submitter may give, so another role's
// job labelled rebalance must not hold back this one (nor may its id be told: the key's rule,
// see deckhand.key_taken). Moves of one object by two rebalances are refused by the
// placements' moving marks (BeginMove) whoever runs them.
func (c *Catalog) UnfinishedRebalance(ctx context.Context) (int64, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `
		SELECT id FROM deckhand.jobs WHERE kind = $1 AND state NOT IN ('finished', 'failed', 'cancelled')
		AND submitted_by = session_user ORDER BY id LIMIT 1`, rebalanceKind).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look for an unfinished rebalance: %w", err)
	}
	return id, nil
}

// LatestRebalance is the caller's newest rebalance job, with its moves in plan order;
// ErrNotFound when there is none. (Another role's job labelled rebalance is not it.)
func (c *Catalog) LatestRebalance(ctx context.Context) (*deckhandtype.RebalanceStatus, error) {
	s := &deckhandtype.RebalanceStatus{}
	err := c.Pool.QueryRow(ctx, `
		SELECT id, state, description, created_at, finished_at FROM deckhand.jobs
		WHERE kind = $1 AND submitted_by = session_user ORDER BY id DESC LIMIT 1`, rebalanceKind).Scan(&s.JobID, &s.State, &s.Description, &s.CreatedAt, &s.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("no rebalance: %w", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the latest rebalance: %w", err)
	}
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, name, state, coalesce(schema_name, '') AS schema_name, coalesce(from_group, '') AS from_group,
		       coalesce(to_group, '') AS to_group, bytes, started_at, finished_at, last_error
		FROM deckhand.rebalance_moves WHERE job_id = $1 ORDER BY task_id`, s.JobID)
	s.Moves, err = pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.RebalanceMove])
	if err != nil {
		return nil, fmt.Errorf("read the moves of rebalance %d: %w", s.JobID, err)
	}
	for _, m := range s.Moves {
		count := &s.Left // blocked, runnable, or held (a paused job's)
		switch m.State {
		case deckhandtype.TaskDone:
			count = &s.Done
		case deckhandtype.TaskRunning, deckhandtype.TaskCancelling:
			count = &s.Running
		case deckhandtype.TaskFailed, deckhandtype.TaskCancelled, deckhandtype.TaskUnscheduled:
			count = &s.Failed
		}
		count.Moves++
		count.Bytes += m.Bytes
	}
	return s, nil
}
