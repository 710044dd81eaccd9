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

// UnfinishedRebalance returns the id of an unfinished rebalance job the caller may see, or 0.
// (Jobs of other submitters that the caller may not see are not told: that is the key's
// rule, see deckhand.key_taken.)
func (c *Catalog) UnfinishedRebalance(ctx context.Context) (int64, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `
		SELECT id FROM deckhand.jobs WHERE kind = $1 AND state NOT IN ('finished', 'failed', 'cancelled')
		ORDER BY id LIMIT 1`, rebalanceKind).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look for an unfinished rebalance: %w", err)
	}
	return id, nil
}

// LatestRebalance is the newest rebalance job the caller may see, with its moves in plan
// order; ErrNotFound when there is none.
func (c *Catalog) LatestRebalance(ctx context.Context) (*deckhandtype.RebalanceStatus, error) {
	s := &deckhandtype.RebalanceStatus{}
	err := c.Pool.QueryRow(ctx, `
		SELECT id, state, description, created_at, finished_at FROM deckhand.jobs
		WHERE kind = $1 ORDER BY id DESC LIMIT 1`, rebalanceKind).Scan(&s.JobID, &s.State, &s.Description, &s.CreatedAt, &s.FinishedAt)
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
