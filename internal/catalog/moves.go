package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// SetMoveStep records the step a move task is at (deckhand.move_progress), creating its row.
func (c *Catalog) SetMoveStep(ctx context.Context, taskID int64, step string, tables int) error {
	_, err := c.Pool.Exec(ctx, `
		INSERT INTO deckhand.move_progress (task_id, step, tables, updated_at) VALUES ($1, $2, $3, coalesce($4, now()))
		ON CONFLICT (task_id) DO UPDATE SET step = excluded.step, tables = excluded.tables, updated_at = excluded.updated_at`,
		taskID, step, tables, c.now())
	if err != nil {
		return fmt.Errorf("record step of move task %d: %w", taskID, err)
	}
	return nil
}

// StartMoveCopy sets a move task's copy counters and applied position back to nothing, for an
// attempt that copies from the start: what an earlier attempt copied or applied (its target
// since removed) is not progress of this one.
func (c *Catalog) StartMoveCopy(ctx context.Context, taskID int64) error {
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.move_progress SET tables_copied = 0, rows_copied = 0, applied_lsn = NULL,
			updated_at = coalesce($2, now())
		WHERE task_id = $1`, taskID, c.now())
	if err != nil {
		return fmt.Errorf("reset copy progress of move task %d: %w", taskID, err)
	}
	return nil
}

// RecordMoveCopied adds a copied table and its rows to a move task's progress.
func (c *Catalog) RecordMoveCopied(ctx context.Context, taskID, rows int64) error {
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.move_progress SET tables_copied = tables_copied + 1, rows_copied = rows_copied + $2,
			updated_at = coalesce($3, now())
		WHERE task_id = $1`, taskID, rows, c.now())
	if err != nil {
		return fmt.Errorf("record copy of move task %d: %w", taskID, err)
	}
	return nil
}

// RecordMoveApplied records the source WAL position the target has applied up to; it never
// goes back.
func (c *Catalog) RecordMoveApplied(ctx context.Context, taskID int64, lsn string) error {
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.move_progress SET applied_lsn = GREATEST(applied_lsn, $2::pg_lsn), updated_at = coalesce($3, now())
		WHERE task_id = $1`, taskID, lsn, c.now())
	if err != nil {
		return fmt.Errorf("record applied position of move task %d: %w", taskID, err)
	}
	return nil
}

// RecordMoveWriteBlock records how long the cut-over blocked writers on the source.
func (c *Catalog) RecordMoveWriteBlock(ctx context.Context, taskID int64, ms int64) error {
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.move_progress SET longest_write_block_ms = GREATEST(longest_write_block_ms, $2::int),
			updated_at = coalesce($3, now())
		WHERE task_id = $1`, taskID, ms, c.now())
	if err != nil {
		return fmt.Errorf("record write block of move task %d: %w", taskID, err)
	}
	return nil
}

// MoveProgress reads a move task's progress; ok is false when it has none yet.
func (c *Catalog) MoveProgress(ctx context.Context, taskID int64) (p deckhandtype.MoveProgress, ok bool, err error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, step, applied_lsn::text AS applied_lsn, tables, tables_copied, rows_copied,
		       longest_write_block_ms, updated_at
		FROM deckhand.move_progress WHERE task_id = $1`, taskID)
	p, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[deckhandtype.MoveProgress])
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("read progress of move task %d: %w", taskID, err)
	}
	return p, true, nil
}

// LeftoverOperationsOfTask lists the operations of earlier attempts of a task that have ended
// (failed) with records still to remove: what a new attempt must see removed before it
// recreates the same resources.
func (c *Catalog) LeftoverOperationsOfTask(ctx context.Context, taskID int64) ([]int64, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT o.id FROM deckhand.operation o
		WHERE o.task_id = $1 AND o.state = 'failed'
		  AND EXISTS (SELECT 1 FROM deckhand.cleanup_record r WHERE r.operation_id = o.id AND r.state IN ('pending', 'due'))
		ORDER BY o.id`, taskID)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read leftover operations of task %d: %w", taskID, err)
	}
	return ids, nil
}
