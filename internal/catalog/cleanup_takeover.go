package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TakeOverCleanup hands records of a failed operation of a task to a running operation of a
// later attempt of the same task, as pending records of the new operation with their
// policies: a new attempt that resumes where a dead one stopped keeps what that one made,
// and the new operation's outcome then decides their removal. It is all or nothing, in one
// transaction: ok is false, and nothing changes, when toOp is not alive, fromOp is not a
// failed operation of toOp's task, or any of the records is no longer pending or due under
// fromOp (a cleaner removed it already; a removal under way is waited for, as its row lock).
func (c *Catalog) TakeOverCleanup(ctx context.Context, fromOp, toOp int64, recordIDs []int64) (ok bool, err error) {
	if len(recordIDs) == 0 {
		return false, fmt.Errorf("take over cleanup records of operation %d: %w: no records", fromOp, ErrInvalid)
	}
	errNotAll := errors.New("not all records can be taken over")
	err = pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var taskID int64
		// FOR SHARE serializes with DecideOperations and FinishOperation, as RegisterCleanup.
		err := tx.QueryRow(ctx, `
			SELECT o.task_id FROM deckhand.operation o
			CROSS JOIN LATERAL deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, $2) a
			WHERE o.id = $1 AND o.state = 'running' AND a.alive AND o.task_id IS NOT NULL
			FOR SHARE OF o`, toOp, c.now()).Scan(&taskID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotAll
		}
		if err != nil {
			return err
		}
		var from int64
		err = tx.QueryRow(ctx, `
			SELECT id FROM deckhand.operation WHERE id = $1 AND task_id = $2 AND state = 'failed' AND id < $3
			FOR SHARE`, fromOp, taskID, toOp).Scan(&from)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotAll
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE deckhand.cleanup_record SET operation_id = $2, state = 'pending', wait_reason = NULL,
				attempts = 0, errors = 0, last_error = NULL, next_attempt_at = '-infinity', due_at = NULL
			WHERE operation_id = $1 AND id = ANY($3::bigint[]) AND state IN ('pending', 'due')`,
			fromOp, toOp, recordIDs)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(recordIDs)) {
			return errNotAll
		}
		return nil
	})
	if errors.Is(err, errNotAll) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take over cleanup records of operation %d: %w", fromOp, err)
	}
	return true, nil
}
