package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// ErrOperationEnded is returned when registering with, or finishing, an operation that has
// already ended or is no longer alive (its attempt was taken over, its lease expired).
var ErrOperationEnded = errors.New("operation is no longer running")

// NewOperation starts an operation. With TaskID and Token set it is scoped to that attempt,
// otherwise to the job.
type NewOperation struct {
	JobID       int64
	TaskID      int64
	Token       int64
	Owner       string
	Description string
}

// BeginOperation records a new operation and returns its id. An attempt-scoped operation is
// refused with ErrOperationEnded unless the attempt is running; a job-scoped one returns the
// job's running job-wide operation if there is one.
func (c *Catalog) BeginOperation(ctx context.Context, op NewOperation) (int64, error) {
	var id int64
	var err error
	if op.TaskID != 0 {
		err = c.Pool.QueryRow(ctx, `
			INSERT INTO deckhand.operation (job_id, task_id, attempt_token, worker_id, owner, submitted_by, description, created_at)
			SELECT t.job_id, t.id, t.attempt_token, t.worker_id, @owner, j.submitted_by, @description, coalesce(@now, now())
			FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
			WHERE t.id = @task AND t.attempt_token = @token AND t.state`+isActive+`
			RETURNING id`,
			pgx.StrictNamedArgs{"task": op.TaskID, "token": op.Token, "owner": op.Owner, "description": op.Description, "now": c.now()},
		).Scan(&id)
	} else {
		for try := 0; try < 3; try++ {
			err = c.Pool.QueryRow(ctx, `
				WITH existing AS (
					SELECT id FROM deckhand.operation WHERE job_id = $1 AND task_id IS NULL AND state = 'running'
				), created AS (
					INSERT INTO deckhand.operation (job_id, owner, submitted_by, description, created_at)
					SELECT $1, $2, j.submitted_by, $3, coalesce($4, now())
					FROM deckhand.job j
					WHERE NOT EXISTS (SELECT 1 FROM existing)
					  AND j.id = $1 AND j.state NOT IN ('finished', 'failed', 'cancelled')
					ON CONFLICT (job_id) WHERE task_id IS NULL AND state = 'running' DO NOTHING
					RETURNING id
				)
				SELECT id FROM existing UNION ALL SELECT id FROM created`,
				op.JobID, op.Owner, op.Description, c.now()).Scan(&id)
			if !errors.Is(err, pgx.ErrNoRows) {
				break
			}
			// Lost a race with another creator (nothing returned): read theirs. A job that has
			// ended also returns nothing, three times.
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("begin operation: %w", ErrOperationEnded)
	}
	if err != nil {
		return 0, fmt.Errorf("begin operation: %w", err)
	}
	return id, nil
}

// resolveSQL applies each policy to the pending records of operations that have ended ($2:
// only these operations, or all when NULL). It runs as its own statement after the operations
// were updated, so that its snapshot sees every record registered before they ended.
const resolveSQL = `
WITH resolved AS (
	UPDATE deckhand.cleanup_record r SET
		state = deckhand.cleanup_state_after(o.state, r.policy),
		due_at = coalesce($1, now()),
		ended_at = CASE WHEN deckhand.cleanup_state_after(o.state, r.policy) = 'forgotten' THEN coalesce($1, now()) END
	FROM deckhand.operation o
	WHERE o.id = r.operation_id AND r.state = 'pending' AND o.state <> 'running'
	  AND ($2::bigint[] IS NULL OR o.id = ANY ($2))
	RETURNING r.state
), unpinned AS (
	DELETE FROM deckhand.cleanup_pin p USING deckhand.operation o
	WHERE p.operation_id = o.id AND o.state <> 'running' AND ($2::bigint[] IS NULL OR o.id = ANY ($2))
)
SELECT count(*) FILTER (WHERE state = 'due') FROM resolved`

// FinishOperation ends an operation in the operation's final catalog transaction: on
// success its on_failure records are forgotten, and its always and deferred_on_success records
// become due; on failure its always and on_failure records become due. Success is refused with
// ErrOperationEnded unless the operation is still alive: the cleaner may already have counted
// it failed. The operation's pins are released. The cleaner is notified.
func (c *Catalog) FinishOperation(ctx context.Context, opID int64, succeeded bool, reason string) error {
	state := deckhandtype.OperationFailed
	if succeeded {
		state = deckhandtype.OperationSucceeded
	}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var current string
		err := tx.QueryRow(ctx, `
			UPDATE deckhand.operation o SET state = $3, end_reason = nullif($4, ''), ended_at = coalesce($1, now())
			WHERE o.id = $2 AND o.state = 'running'
			  AND ($3 = 'failed' OR (SELECT alive FROM deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, $1)))
			RETURNING o.state`, c.now(), opID, state, reason).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) {
			var was deckhandtype.OperationState
			if err := tx.QueryRow(ctx, `SELECT state FROM deckhand.operation WHERE id = $1`, opID).Scan(&was); err != nil {
				return fmt.Errorf("%w (%v)", ErrOperationEnded, err)
			}
			if was == deckhandtype.OperationRunning {
				return fmt.Errorf("%w: its attempt is over or its worker's lease expired", ErrOperationEnded)
			}
			return fmt.Errorf("%w: it is %s", ErrOperationEnded, was)
		}
		if err != nil {
			return err
		}
		var due int
		if err := tx.QueryRow(ctx, resolveSQL, c.now(), []int64{opID}).Scan(&due); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelCleanup)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish operation %d: %w", opID, err)
	}
	return nil
}

// EndedOperation is an orphan that DecideOperations ended.
type EndedOperation struct {
	ID     int64  `db:"id"`
	JobID  int64  `db:"job_id"`
	State  string `db:"state"`
	Reason string `db:"end_reason"`
}

// DecideOperations ends every running operation that is no longer alive: its job ended, its
// attempt ended without finishing it, or its worker's lease expired. A job-wide operation
// whose job finished succeeded; every other orphan failed. Their records are resolved by
// policy, pins released, and the cleaner notified. It returns the operations it ended.
func (c *Catalog) DecideOperations(ctx context.Context) ([]EndedOperation, error) {
	var ended []EndedOperation
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `
			WITH orphan AS (
				SELECT o.id,
					CASE WHEN o.task_id IS NULL AND j.state = 'finished' THEN 'succeeded' ELSE 'failed' END AS state,
					CASE WHEN o.task_id IS NULL THEN 'orphaned: job ' || coalesce(j.state, 'deleted')
					     WHEN t.id IS NULL THEN 'orphaned: task deleted'
					     WHEN t.attempt_token IS DISTINCT FROM o.attempt_token OR t.state NOT IN ('running', 'cancelling')
					          THEN 'orphaned: the task attempt ended without finishing the operation'
					     ELSE 'orphaned: the worker''s lease expired' END AS reason
				FROM deckhand.operation o
				LEFT JOIN deckhand.job j ON j.id = o.job_id
				LEFT JOIN deckhand.task t ON t.id = o.task_id
				CROSS JOIN LATERAL deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, $1) a
				WHERE o.state = 'running' AND NOT a.alive
				ORDER BY o.id
			)
			UPDATE deckhand.operation o SET state = orphan.state, end_reason = orphan.reason, ended_at = coalesce($1, now())
			FROM orphan WHERE o.id = orphan.id AND o.state = 'running'
			RETURNING o.id, o.job_id, o.state, o.end_reason`, c.now())
		var err error
		ended, err = pgx.CollectRows(rows, pgx.RowToStructByName[EndedOperation])
		if err != nil {
			return err
		}
		// Also resolves pending records left by any earlier race, hence no id filter.
		var due int
		if err := tx.QueryRow(ctx, resolveSQL, c.now(), nil).Scan(&due); err != nil {
			return err
		}
		if len(ended) > 0 || due > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelCleanup)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decide orphaned operations: %w", err)
	}
	return ended, nil
}

// Operation is a row of deckhand.operations.
type Operation struct {
	ID           int64                       `json:"id" db:"id"`
	JobID        int64                       `json:"job_id" db:"job_id"`
	TaskID       *int64                      `json:"task_id" db:"task_id"`
	AttemptToken *int64                      `json:"attempt_token" db:"attempt_token"`
	WorkerID     *int64                      `json:"worker_id" db:"worker_id"`
	Owner        string                      `json:"owner" db:"owner"`
	Description  string                      `json:"description" db:"description"`
	State        deckhandtype.OperationState `json:"state" db:"state"`
	EndReason    *string                     `json:"end_reason" db:"end_reason"`
	CreatedAt    time.Time                   `json:"created_at" db:"created_at"`
	EndedAt      *time.Time                  `json:"ended_at" db:"ended_at"`
}

// OperationByID reads one operation.
func (c *Catalog) OperationByID(ctx context.Context, id int64) (Operation, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, job_id, task_id, attempt_token, worker_id, owner, description, state, end_reason, created_at, ended_at
		FROM deckhand.operations WHERE id = $1`, id)
	op, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Operation])
	if errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, fmt.Errorf("operation %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Operation{}, fmt.Errorf("read operation %d: %w", id, err)
	}
	return op, nil
}

// SucceededOperationOfTask returns the id of an operation that an earlier attempt of the task
// ended successfully, or 0: a task kind that finds one must not redo its work.
func (c *Catalog) SucceededOperationOfTask(ctx context.Context, taskID int64) (int64, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `
		SELECT id FROM deckhand.operation WHERE task_id = $1 AND state = 'succeeded' ORDER BY id DESC LIMIT 1`, taskID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read operations of task %d: %w", taskID, err)
	}
	return id, nil
}

// DeleteEndedCleanup removes, up to limit at a time, operations that ended before cutoff and
// whose records were all removed or forgotten before it, with those records. Failed and
// node_removed records (and so their operations) stay until an operator retries or forgets them.
func (c *Catalog) DeleteEndedCleanup(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := c.Pool.Exec(ctx, `
		DELETE FROM deckhand.operation WHERE id IN (
			SELECT o.id FROM deckhand.operation o
			WHERE o.state <> 'running' AND o.ended_at < $1
			  AND NOT EXISTS (SELECT 1 FROM deckhand.cleanup_record r WHERE r.operation_id = o.id
			                  AND NOT (r.state IN ('removed', 'forgotten') AND r.ended_at < $1))
			ORDER BY o.ended_at LIMIT $2)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("cleanup retention: %w", err)
	}
	return tag.RowsAffected(), nil
}
