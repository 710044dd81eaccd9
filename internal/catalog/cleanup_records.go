package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ResourceBusyError is returned by RegisterCleanup when another record is live for the same
// resource. When its operation has ended, the record awaits removal: remove it first.
type ResourceBusyError struct {
	Resource      deckhandtype.CleanupResource
	RecordID      int64
	OperationID   int64
	State         string
	OperationLive bool
}

func (e *ResourceBusyError) Error() string {
	if e.OperationLive {
		return fmt.Sprintf("%s %s is already registered by running operation %d (record %d)",
			e.Resource.Type, e.Resource.Display(), e.OperationID, e.RecordID)
	}
	return fmt.Sprintf("%s %s is still to be cleaned up for operation %d (record %d, %s)",
		e.Resource.Type, e.Resource.Display(), e.OperationID, e.RecordID, e.State)
}

// RegisterCleanup records, in its own transaction, that the operation is about to create (or
// will remove) a resource, with a policy. It fails with ErrOperationEnded when the operation
// is not alive, and with *ResourceBusyError when another live record names the resource.
// Older failed or node_removed records of the same resource are superseded (forgotten).
func (c *Catalog) RegisterCleanup(ctx context.Context, opID int64, r deckhandtype.CleanupResource, policy deckhandtype.Policy) (int64, error) {
	var id int64
	// FOR SHARE on the operation row serializes with DecideOperations and FinishOperation, so
	// a record is never inserted under an operation that has just ended.
	err := c.Pool.QueryRow(ctx, `
		WITH op AS (
			SELECT o.id FROM deckhand.operation o
			CROSS JOIN LATERAL deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, @now) a
			WHERE o.id = @op AND o.state = 'running' AND a.alive
			FOR SHARE OF o
		), superseded AS (
			UPDATE deckhand.cleanup_record SET state = 'forgotten', ended_at = coalesce(@now, now()),
				last_error = 'superseded by a newer record of the same resource'
			WHERE coalesce(node, '') = coalesce(@node, '') AND resource_type = @type AND location = @location AND name = @name
			  AND state IN ('failed', 'node_removed') AND EXISTS (SELECT 1 FROM op)
		)
		INSERT INTO deckhand.cleanup_record (operation_id, resource_type, node, location, name, policy, created_at)
		SELECT id, @type, @node, @location, @name, @policy, coalesce(@now, now()) FROM op
		RETURNING id`,
		resourceArgs(r, pgx.StrictNamedArgs{"now": c.now(), "op": opID, "policy": policy})).Scan(&id)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("register %s %s: operation %d: %w", r.Type, r.Display(), opID, ErrOperationEnded)
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		busy, lookErr := c.liveRecordOf(ctx, r)
		if lookErr != nil {
			return 0, fmt.Errorf("register %s %s: %w", r.Type, r.Display(), lookErr)
		}
		if busy == nil { // removed meanwhile
			return c.RegisterCleanup(ctx, opID, r, policy)
		}
		return 0, busy
	case err != nil:
		return 0, fmt.Errorf("register %s %s: %w", r.Type, r.Display(), err)
	}
	return id, nil
}

// LiveCleanupOf is the record, pending or due, that registers r for removal; nil when there
// is none.
func (c *Catalog) LiveCleanupOf(ctx context.Context, r deckhandtype.CleanupResource) (*ResourceBusyError, error) {
	return c.liveRecordOf(ctx, r)
}

func (c *Catalog) liveRecordOf(ctx context.Context, r deckhandtype.CleanupResource) (*ResourceBusyError, error) {
	e := &ResourceBusyError{Resource: r}
	err := c.Pool.QueryRow(ctx, `
		SELECT r.id, r.operation_id, r.state, o.state = 'running' AND a.alive
		FROM deckhand.cleanup_record r JOIN deckhand.operation o ON o.id = r.operation_id
		CROSS JOIN LATERAL deckhand.operation_alive(o.job_id, o.task_id, o.attempt_token, @now) a
		WHERE coalesce(r.node, '') = coalesce(@node, '') AND r.resource_type = @type AND r.location = @location AND r.name = @name
		  AND r.state IN ('pending', 'due')`,
		resourceArgs(r, pgx.StrictNamedArgs{"now": c.now()})).Scan(&e.RecordID, &e.OperationID, &e.State, &e.OperationLive)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// resourceArgs adds a resource to a statement's arguments, as @type, @node (NULL for object
// storage), @location and @name.
func resourceArgs(r deckhandtype.CleanupResource, args pgx.StrictNamedArgs) pgx.StrictNamedArgs {
	args["type"], args["node"], args["location"], args["name"] = r.Type, nonEmpty(r.Node), r.Location, r.Name
	return args
}

// ForgetCleanup drops a pending record of a running operation: the operation learned that the
// resource is not its own (creating it found the name taken), so it must never be removed.
func (c *Catalog) ForgetCleanup(ctx context.Context, opID, recordID int64) error {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.cleanup_record SET state = 'forgotten', ended_at = coalesce($3, now()),
			last_error = 'not created by its operation'
		WHERE id = $1 AND operation_id = $2 AND state = 'pending'`, recordID, opID, c.now())
	if err != nil {
		return fmt.Errorf("forget cleanup record %d: %w", recordID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("forget cleanup record %d: %w", recordID, ErrOperationEnded)
	}
	return nil
}

// CleanupRecords lists cleanup records, newest first.
func (c *Catalog) CleanupRecords(ctx context.Context, f deckhandtype.CleanupFilter) ([]deckhandtype.CleanupRecord, error) {
	if f.Limit <= 0 {
		f.Limit = 500
	}
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, operation_id, job_id, task_id, owner, operation_state, resource_type, node, location, name,
			policy, state, attempts, errors, last_error, next_attempt_at, created_at, due_at, ended_at
		FROM deckhand.cleanup_records
		WHERE (nullif($1, '') IS NULL OR state = $1) AND ($2 = 0 OR operation_id = $2) AND ($3 = 0 OR job_id = $3)
		ORDER BY id DESC LIMIT $4`, f.State, f.OperationID, f.JobID, f.Limit)
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.CleanupRecord])
	if err != nil {
		return nil, fmt.Errorf("list cleanup records: %w", err)
	}
	return recs, nil
}

// MarkNodeRemoved moves the pending-for-ever records of removed nodes to node_removed, where
// they are reported instead of retried: due records whose node is gone. Records of running
// operations stay pending until their operation ends.
func (c *Catalog) MarkNodeRemoved(ctx context.Context) (int64, error) {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.cleanup_record r SET state = 'node_removed', wait_reason = NULL, ended_at = coalesce($1, now()),
			last_error = 'node ' || r.node || ' is no longer registered'
		WHERE r.state = 'due' AND r.node IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = r.node)`, c.now())
	if err != nil {
		return 0, fmt.Errorf("mark records of removed nodes: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RetryCleanupRecord makes a failed or node_removed record due again, with its error count
// reset: the operator fixed the cause (granted a privilege, re-added the node). Admins only
// (deckhand.cleanup_retry).
func (c *Catalog) RetryCleanupRecord(ctx context.Context, id int64) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.cleanup_retry($1)`, id)
	return callError(err)
}

// ForgetCleanupRecord gives up on a record: the resource, if it still exists, is the
// operator's to keep or drop. Records of running operations cannot be forgotten. Admins only
// (deckhand.cleanup_forget).
func (c *Catalog) ForgetCleanupRecord(ctx context.Context, id int64) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.cleanup_forget($1)`, id)
	return callError(err)
}
