package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Operation states. An operation is the scope cleanup records belong to: one attempt of a task,
// or a whole job. It is alive while it runs and
//   - for an attempt: the task still runs that attempt (same attempt token) and the worker's
//     lease is fresh;
//   - for a job: the job is not terminal.
//
// An operation that is not alive any more but still says running is an orphan; the cleaner
// decides it (DecideOperations): failed, except a job-wide operation whose job finished.
//
//	running ──Finish(success), while alive──▶ succeeded
//	   └─────Finish(failure) / orphaned──────▶ failed
const (
	OperationRunning   = "running"
	OperationSucceeded = "succeeded"
	OperationFailed    = "failed"
)

// Cleanup policies (Citus' three).
const (
	PolicyOnFailure         = "on_failure"          // removed if the operation fails; forgotten on success
	PolicyAlways            = "always"              // removed when the operation ends, either way
	PolicyDeferredOnSuccess = "deferred_on_success" // removed after success, once nothing uses it; forgotten on failure
)

// Resource types a cleanup record can name.
const (
	ResourceTable           = "table"
	ResourceIndex           = "index"
	ResourceSchema          = "schema"
	ResourcePublication     = "publication"
	ResourceSubscription    = "subscription"
	ResourceReplicationSlot = "replication_slot"
	ResourceObject          = "object"
	ResourcePrefix          = "prefix"
)

// Cleanup record states, as stored. Every transition is a guarded UPDATE in this file.
//
//	            operation ends; policy says remove                  drop succeeded or
//	pending ─────────────────────────────────────▶ due ─────────────────────────────▶ removed
//	   │                                           │ ▲  already gone
//	   │ operation ends; policy says keep          │ │
//	   │ (on_failure after success,                │ │ in use (lock timeout, active slot), transient
//	   │  deferred_on_success after failure),      │ │ error or pinned: wait_reason set,
//	   │ or the creation found the name taken      │ │ next_attempt_at = now + backoff
//	   ▼                                           │ └─
//	forgotten ◀──── operator: cleanup forget ──────┤
//	                                               ├── permanent error, or too many transient ones ──▶ failed
//	                                               └── its node is no longer registered ─────────────▶ node_removed
//
// failed and node_removed are never retried on their own: they wait for an operator, who
// fixes the cause and runs `deckhand cleanup retry` (back to due) or `deckhand cleanup forget`.
// Records of a running operation are only ever pending: nothing touches them.
const (
	CleanupPending     = "pending"
	CleanupDue         = "due"
	CleanupRemoved     = "removed"
	CleanupForgotten   = "forgotten"
	CleanupFailed      = "failed"
	CleanupNodeRemoved = "node_removed"
)

// Why a due record waits (wait_reason), shown as its state by deckhand.cleanup_records.
const (
	CleanupInUse    = "in_use"   // a query or a walsender holds the resource
	CleanupRetrying = "retrying" // a transient error; tried again after a backoff
	CleanupPinned   = "pinned"   // a pin keeps it alive
)

// ChannelCleanup is notified when cleanup records become due (payload: empty; anyone may listen).
const ChannelCleanup = "deckhand_cleanup"

// ErrOperationEnded is returned when registering with, or finishing, an operation that has
// already ended or is no longer alive (its attempt was taken over, its lease expired).
var ErrOperationEnded = errors.New("operation is no longer running")

// CleanupResource identifies a resource. Location is the schema of a table or index and the
// bucket URL of an object or prefix; Node is empty for object storage.
type CleanupResource struct {
	Type     string `json:"type"`
	Node     string `json:"node,omitempty"`
	Location string `json:"location,omitempty"`
	Name     string `json:"name"`
}

func (r CleanupResource) nodeArg() *string {
	if r.Node == "" {
		return nil
	}
	return &r.Node
}

// NewOperation starts an operation. With TaskID and Token set it is scoped to that attempt,
// otherwise to the job.
type NewOperation struct {
	JobID       int64
	TaskID      int64
	Token       int64
	Owner       string
	Description string
}

// aliveSQL is true while operation o may still create resources; $1 is the injected clock.
const aliveSQL = `(CASE WHEN o.task_id IS NOT NULL THEN EXISTS (
		SELECT 1 FROM deckhand.task t JOIN deckhand.worker w ON w.id = t.worker_id
		WHERE t.id = o.task_id AND t.attempt_token = o.attempt_token AND t.state IN ('running', 'cancelling')
		  AND w.stopped_at IS NULL AND w.lease_expires_at > coalesce($1, now()))
	ELSE EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = o.job_id AND j.state NOT IN ('finished', 'failed', 'cancelled')) END)`

// BeginOperation records a new operation and returns its id. An attempt-scoped operation is
// refused with ErrOperationEnded unless the attempt is running; a job-scoped one returns the
// job's running job-wide operation if there is one.
func (c *Catalog) BeginOperation(ctx context.Context, op NewOperation) (int64, error) {
	var id int64
	var err error
	if op.TaskID != 0 {
		err = c.Pool.QueryRow(ctx, `
			INSERT INTO deckhand.operation (job_id, task_id, attempt_token, worker_id, owner, submitted_by, description, created_at)
			SELECT t.job_id, t.id, t.attempt_token, t.worker_id, $3, j.submitted_by, $4, coalesce($5, now())
			FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
			WHERE t.id = $1 AND t.attempt_token = $2 AND t.state IN ('running', 'cancelling')
			RETURNING id`, op.TaskID, op.Token, op.Owner, op.Description, c.now()).Scan(&id)
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

// ResourceBusyError is returned by RegisterCleanup when another record is live for the same
// resource. When its operation has ended, the record awaits removal: remove it first.
type ResourceBusyError struct {
	Resource      CleanupResource
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

// Display is the resource as people write it: schema.name, bucket/key, or the bare name.
func (r CleanupResource) Display() string {
	s := r.Name
	switch {
	case r.Type == ResourceObject || r.Type == ResourcePrefix:
		s = r.Location + " " + r.Name
	case r.Location != "":
		s = pgx.Identifier{r.Location, r.Name}.Sanitize()
	default:
		s = pgx.Identifier{r.Name}.Sanitize()
	}
	if r.Node != "" {
		s += " on " + r.Node
	}
	return s
}

// RegisterCleanup records, in its own transaction, that the operation is about to create (or
// will remove) a resource, with a policy. It fails with ErrOperationEnded when the operation
// is not alive, and with *ResourceBusyError when another live record names the resource.
// Older failed or node_removed records of the same resource are superseded (forgotten).
func (c *Catalog) RegisterCleanup(ctx context.Context, opID int64, r CleanupResource, policy string) (int64, error) {
	var id int64
	// FOR SHARE on the operation row serializes with DecideOperations and FinishOperation, so
	// a record is never inserted under an operation that has just ended.
	err := c.Pool.QueryRow(ctx, `
		WITH op AS (
			SELECT o.id FROM deckhand.operation o
			WHERE o.id = $2 AND o.state = 'running' AND `+aliveSQL+`
			FOR SHARE OF o
		), superseded AS (
			UPDATE deckhand.cleanup_record SET state = 'forgotten', ended_at = coalesce($1, now()),
				last_error = 'superseded by a newer record of the same resource'
			WHERE coalesce(node, '') = coalesce($4, '') AND resource_type = $3 AND location = $5 AND name = $6
			  AND state IN ('failed', 'node_removed') AND EXISTS (SELECT 1 FROM op)
		)
		INSERT INTO deckhand.cleanup_record (operation_id, resource_type, node, location, name, policy, created_at)
		SELECT id, $3, $4, $5, $6, $7, coalesce($1, now()) FROM op
		RETURNING id`,
		c.now(), opID, r.Type, r.nodeArg(), r.Location, r.Name, policy).Scan(&id)
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

func (c *Catalog) liveRecordOf(ctx context.Context, r CleanupResource) (*ResourceBusyError, error) {
	e := &ResourceBusyError{Resource: r}
	err := c.Pool.QueryRow(ctx, `
		SELECT r.id, r.operation_id, r.state, o.state = 'running' AND `+aliveSQL+`
		FROM deckhand.cleanup_record r JOIN deckhand.operation o ON o.id = r.operation_id
		WHERE coalesce(r.node, '') = coalesce($2, '') AND r.resource_type = $3 AND r.location = $4 AND r.name = $5
		  AND r.state IN ('pending', 'due')`,
		c.now(), r.nodeArg(), r.Type, r.Location, r.Name).Scan(&e.RecordID, &e.OperationID, &e.State, &e.OperationLive)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e, nil
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

// resolveSQL applies each policy to the pending records of operations that have ended ($2:
// only these operations, or all when NULL). It runs as its own statement after the operations
// were updated, so that its snapshot sees every record registered before they ended.
const resolveSQL = `
WITH resolved AS (
	UPDATE deckhand.cleanup_record r SET
		state = CASE WHEN (o.state = 'succeeded' AND r.policy = 'on_failure')
		               OR (o.state = 'failed' AND r.policy = 'deferred_on_success') THEN 'forgotten'
		             ELSE 'due' END,
		due_at = coalesce($1, now()),
		ended_at = CASE WHEN (o.state = 'succeeded' AND r.policy = 'on_failure')
		                  OR (o.state = 'failed' AND r.policy = 'deferred_on_success') THEN coalesce($1, now()) END
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
	state := OperationFailed
	if succeeded {
		state = OperationSucceeded
	}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var current string
		err := tx.QueryRow(ctx, `
			UPDATE deckhand.operation o SET state = $3, end_reason = nullif($4, ''), ended_at = coalesce($1, now())
			WHERE o.id = $2 AND o.state = 'running' AND ($3 = 'failed' OR `+aliveSQL+`)
			RETURNING o.state`, c.now(), opID, state, reason).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) {
			var was string
			if err := tx.QueryRow(ctx, `SELECT state FROM deckhand.operation WHERE id = $1`, opID).Scan(&was); err != nil {
				return fmt.Errorf("%w (%v)", ErrOperationEnded, err)
			}
			if was == OperationRunning {
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
				WHERE o.state = 'running' AND NOT `+aliveSQL+`
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

// DueRecord is a due cleanup record claimed for one removal attempt.
type DueRecord struct {
	ID          int64   `db:"id"`
	OperationID int64   `db:"operation_id"`
	JobID       int64   `db:"job_id"`
	Type        string  `db:"resource_type"`
	Node        *string `db:"node"`
	NodeDSN     *string `db:"node_dsn"` // nil when the node is no longer registered
	Location    string  `db:"location"`
	Name        string  `db:"name"`
	Policy      string  `db:"policy"`
	Owner       string  `db:"owner"`
	SubmittedBy string  `db:"submitted_by"` // the job's submitter, who must be a member of Owner on the node
	Attempts    int     `db:"attempts"`
	Errors      int     `db:"errors"`
	PinnedBy    *string `db:"pinned_by"`
}

// Resource is the record's resource.
func (d *DueRecord) Resource() CleanupResource {
	r := CleanupResource{Type: d.Type, Location: d.Location, Name: d.Name}
	if d.Node != nil {
		r.Node = *d.Node
	}
	return r
}

// CleanupOutcome is what one removal attempt found.
type CleanupOutcome struct {
	// State is CleanupRemoved, CleanupFailed, CleanupNodeRemoved, or a wait reason
	// (CleanupInUse, CleanupRetrying, CleanupPinned) that keeps the record due.
	State   string
	Error   string
	Backoff time.Duration // for a wait reason: how long until the next attempt
}

// CleanupClaim selects which due record ClaimCleanup takes.
type CleanupClaim struct {
	OperationID int64   // only records of this operation; 0 for any
	Force       []int64 // records to try even if their next attempt is later (their resource looks free)
	Skip        []int64 // records not to take (already handled in this pass)
	// IgnoreBackoff takes records whose next attempt is later too: an operator asked for a run.
	IgnoreBackoff bool
}

// ClaimCleanup takes the next due record whose turn has come — in dependency order within its
// operation — locks it for the length of fn, and stores what fn found. The lock is a row lock
// in an open catalog transaction, so a cleaner that dies mid-removal frees the record at once
// and concurrent cleaners (leader, `cleanup run`, the operation itself) never take the same
// record. It returns false when no record is ready.
func (c *Catalog) ClaimCleanup(ctx context.Context, sel CleanupClaim, fn func(context.Context, *DueRecord) CleanupOutcome) (*DueRecord, *CleanupOutcome, error) {
	var (
		rec *DueRecord
		out CleanupOutcome
	)
	var opArg *int64
	if sel.OperationID != 0 {
		opArg = &sel.OperationID
	}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `
			SELECT r.id, r.operation_id, o.job_id, r.resource_type, r.node, n.dsn AS node_dsn, r.location, r.name,
				r.policy, o.owner, coalesce(o.submitted_by, '') AS submitted_by, r.attempts, r.errors,
				deckhand.pinned_by(r.resource_type, r.node, r.location, r.name) AS pinned_by
			FROM deckhand.cleanup_record r
			JOIN deckhand.operation o ON o.id = r.operation_id
			LEFT JOIN deckhand.node n ON n.name = r.node
			WHERE r.state = 'due'
			  AND (r.next_attempt_at <= coalesce($1, now()) OR r.id = ANY ($2) OR $5)
			  AND ($3::bigint IS NULL OR r.operation_id = $3)
			  AND r.id <> ALL ($4)
			  AND NOT EXISTS (SELECT 1 FROM deckhand.cleanup_record e
			                  WHERE e.operation_id = r.operation_id AND e.rank < r.rank AND e.state IN ('pending', 'due'))
			ORDER BY r.operation_id, r.rank, r.id
			LIMIT 1
			FOR UPDATE OF r SKIP LOCKED`, c.now(), nonNil(sel.Force), opArg, nonNil(sel.Skip), sel.IgnoreBackoff)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByName[DueRecord])
		if err != nil || len(got) == 0 {
			return err
		}
		rec = &got[0]
		out = fn(ctx, rec)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		final := out.State == CleanupRemoved || out.State == CleanupFailed || out.State == CleanupNodeRemoved
		_, err = tx.Exec(ctx, `
			UPDATE deckhand.cleanup_record SET
				state = CASE WHEN $6 THEN $2 ELSE 'due' END,
				wait_reason = CASE WHEN $6 THEN NULL ELSE $2 END,
				attempts = attempts + CASE WHEN $2 IN ('pinned', 'node_removed') THEN 0 ELSE 1 END,
				errors = errors + CASE WHEN $2 IN ('retrying', 'failed') THEN 1 ELSE 0 END,
				last_error = coalesce(deckhand.redact(nullif($3, '')), CASE WHEN $2 = 'removed' THEN last_error END),
				next_attempt_at = coalesce($5, now()) + $4::interval,
				ended_at = CASE WHEN $6 THEN coalesce($5, now()) END
			WHERE id = $1`, rec.ID, out.State, out.Error, out.Backoff, c.now(), final)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim cleanup record: %w", err)
	}
	if rec == nil {
		return nil, nil, nil
	}
	return rec, &out, nil
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// WaitingRecord is a due record that found its resource in use and waits for its next
// attempt; the cleaner probes its node and retries it early once nothing holds it.
type WaitingRecord struct {
	ID      int64  `db:"id"`
	Type    string `db:"resource_type"`
	Node    string `db:"node"`
	NodeDSN string `db:"node_dsn"`
	Owner   string `db:"owner"`
	// SubmittedBy is the job's submitter, who must be a member of Owner on the node.
	SubmittedBy string  `db:"submitted_by"`
	Location    string  `db:"location"`
	Name        string  `db:"name"`
	NextAt      float64 `db:"next_in"` // seconds until its next attempt
}

// WaitingInUse lists the due records that wait because their resource was in use, on nodes
// that are still registered, whose turn in their operation's order has come.
// opID 0 means every operation.
func (c *Catalog) WaitingInUse(ctx context.Context, opID int64) ([]WaitingRecord, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT r.id, r.resource_type, r.node, n.dsn AS node_dsn, o.owner, coalesce(o.submitted_by, '') AS submitted_by, r.location, r.name,
			extract(epoch FROM r.next_attempt_at - coalesce($1, now()))::float8 AS next_in
		FROM deckhand.cleanup_record r
		JOIN deckhand.operation o ON o.id = r.operation_id
		JOIN deckhand.node n ON n.name = r.node
		WHERE r.state = 'due' AND r.wait_reason = 'in_use' AND r.next_attempt_at > coalesce($1, now())
		  AND ($2 = 0 OR r.operation_id = $2)
		  AND NOT EXISTS (SELECT 1 FROM deckhand.cleanup_record e
		                  WHERE e.operation_id = r.operation_id AND e.rank < r.rank AND e.state IN ('pending', 'due'))
		ORDER BY r.node, r.id LIMIT 1000`, c.now(), opID)
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByName[WaitingRecord])
	if err != nil {
		return nil, fmt.Errorf("list records waiting in use: %w", err)
	}
	return recs, nil
}

// NextCleanupIn returns how long until the earliest due record may be tried, or -1 when
// none is due.
func (c *Catalog) NextCleanupIn(ctx context.Context) (time.Duration, error) {
	var secs *float64
	err := c.Pool.QueryRow(ctx, `
		-- greatest() ignores NULL: with nothing due, say so instead of "now".
		SELECT CASE WHEN min(next_attempt_at) IS NOT NULL
		            THEN greatest(extract(epoch FROM min(next_attempt_at) - coalesce($1, now())), 0)::float8 END
		FROM deckhand.cleanup_record WHERE state = 'due'`, c.now()).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("next cleanup: %w", err)
	}
	if secs == nil {
		return -1, nil
	}
	return time.Duration(*secs * float64(time.Second)), nil
}

// CleanupRecord is a row of deckhand.cleanup_records.
type CleanupRecord struct {
	ID             int64      `json:"id" db:"id"`
	OperationID    int64      `json:"operation_id" db:"operation_id"`
	JobID          int64      `json:"job_id" db:"job_id"`
	TaskID         *int64     `json:"task_id" db:"task_id"`
	Owner          string     `json:"owner" db:"owner"`
	OperationState string     `json:"operation_state" db:"operation_state"`
	Type           string     `json:"resource_type" db:"resource_type"`
	Node           *string    `json:"node" db:"node"`
	Location       string     `json:"location" db:"location"`
	Name           string     `json:"name" db:"name"`
	Policy         string     `json:"policy" db:"policy"`
	State          string     `json:"state" db:"state"`
	Attempts       int        `json:"attempts" db:"attempts"`
	Errors         int        `json:"errors" db:"errors"`
	LastError      *string    `json:"last_error" db:"last_error"`
	NextAttemptAt  *time.Time `json:"next_attempt_at" db:"next_attempt_at"`
	CreatedAt      time.Time  `json:"created_at" db:"created_at"`
	DueAt          *time.Time `json:"due_at" db:"due_at"`
	EndedAt        *time.Time `json:"ended_at" db:"ended_at"`
}

// Resource is the record's resource.
func (r *CleanupRecord) Resource() CleanupResource {
	res := CleanupResource{Type: r.Type, Location: r.Location, Name: r.Name}
	if r.Node != nil {
		res.Node = *r.Node
	}
	return res
}

// CleanupFilter selects records for listing, newest first.
type CleanupFilter struct {
	State       string // as shown by the view (node_removed, in_use, ...); empty for all
	OperationID int64
	JobID       int64
	Limit       int // 0 means 500
}

// CleanupRecords lists cleanup records, newest first.
func (c *Catalog) CleanupRecords(ctx context.Context, f CleanupFilter) ([]CleanupRecord, error) {
	if f.Limit <= 0 {
		f.Limit = 500
	}
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, operation_id, job_id, task_id, owner, operation_state, resource_type, node, location, name,
			policy, state, attempts, errors, last_error, next_attempt_at, created_at, due_at, ended_at
		FROM deckhand.cleanup_records
		WHERE (nullif($1, '') IS NULL OR state = $1) AND ($2 = 0 OR operation_id = $2) AND ($3 = 0 OR job_id = $3)
		ORDER BY id DESC LIMIT $4`, f.State, f.OperationID, f.JobID, f.Limit)
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByName[CleanupRecord])
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

// Pin is a row of deckhand.cleanup_pins.
type Pin struct {
	ID          int64     `json:"id" db:"id"`
	Type        string    `json:"resource_type" db:"resource_type"`
	Node        *string   `json:"node" db:"node"`
	Location    string    `json:"location" db:"location"`
	Name        string    `json:"name" db:"name"`
	OperationID *int64    `json:"operation_id" db:"operation_id"`
	JobID       *int64    `json:"job_id" db:"job_id"`
	Reason      string    `json:"reason" db:"reason"`
	CreatedBy   string    `json:"created_by" db:"created_by"`
	CreatedAt   time.Time `json:"created_at" db:"created_at"`
	InForce     bool      `json:"in_force" db:"in_force"`
}

// PinResource keeps a resource alive. With opID it lasts while that operation runs (and is
// refused with ErrOperationEnded if it does not): workers pin what their operations use. With
// opID 0 it lasts until UnpinResource: an admin's pin (deckhand.pin).
func (c *Catalog) PinResource(ctx context.Context, r CleanupResource, opID int64, reason string) (int64, error) {
	var id int64
	if opID == 0 {
		err := c.Pool.QueryRow(ctx, `SELECT deckhand.pin($1, $2, $3, $4, $5)`, r.Type, r.Node, r.Location, r.Name, reason).Scan(&id)
		return id, callError(err)
	}
	err := c.Pool.QueryRow(ctx, `
		INSERT INTO deckhand.cleanup_pin (resource_type, node, location, name, operation_id, reason)
		SELECT $1, $2, $3, $4, $5, $6
		WHERE EXISTS (SELECT 1 FROM deckhand.operation WHERE id = $5 AND state = 'running')
		RETURNING id`, r.Type, r.nodeArg(), r.Location, r.Name, opID, reason).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pin %s %s: operation %d: %w", r.Type, r.Display(), opID, ErrOperationEnded)
	}
	if err != nil {
		return 0, fmt.Errorf("pin %s %s: %w", r.Type, r.Display(), err)
	}
	return id, nil
}

// UnpinResource removes an admin's pin (deckhand.unpin); due records it held back are tried at once.
func (c *Catalog) UnpinResource(ctx context.Context, pinID int64) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.unpin($1)`, pinID)
	return callError(err)
}

// UnpinOperation removes the pins an operation holds on a resource; due records they held
// back are tried at once.
func (c *Catalog) UnpinOperation(ctx context.Context, opID int64, r CleanupResource) error {
	_, err := c.Pool.Exec(ctx, `
		WITH unpinned AS (
			DELETE FROM deckhand.cleanup_pin
			WHERE operation_id = $1 AND resource_type = $2 AND coalesce(node, '') = coalesce($3, '') AND location = $4 AND name = $5
			RETURNING node, location
		), woken AS (
			UPDATE deckhand.cleanup_record SET next_attempt_at = '-infinity'
			WHERE state = 'due' AND wait_reason = 'pinned' AND coalesce(node, '') = coalesce($3, '') AND location = $4
			  AND EXISTS (SELECT 1 FROM unpinned)
			RETURNING id
		)
		SELECT pg_notify($6, '') WHERE EXISTS (SELECT 1 FROM woken)`,
		opID, r.Type, r.nodeArg(), r.Location, r.Name, ChannelCleanup)
	if err != nil {
		return fmt.Errorf("unpin %s %s: %w", r.Type, r.Display(), err)
	}
	return nil
}

// PinnedBy describes the pin in force on a resource, or returns "" when there is none.
func (c *Catalog) PinnedBy(ctx context.Context, r CleanupResource) (string, error) {
	var by *string
	err := c.Pool.QueryRow(ctx, `SELECT deckhand.pinned_by($1, $2, $3, $4)`, r.Type, r.nodeArg(), r.Location, r.Name).Scan(&by)
	if err != nil {
		return "", fmt.Errorf("check pins on %s %s: %w", r.Type, r.Display(), err)
	}
	if by == nil {
		return "", nil
	}
	return *by, nil
}

// Pins lists pins, newest first.
func (c *Catalog) Pins(ctx context.Context) ([]Pin, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, resource_type, node, location, name, operation_id, job_id, reason, created_by, created_at, in_force
		FROM deckhand.cleanup_pins ORDER BY id DESC LIMIT 1000`)
	pins, err := pgx.CollectRows(rows, pgx.RowToStructByName[Pin])
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return pins, nil
}

// Operation is a row of deckhand.operations.
type Operation struct {
	ID           int64      `json:"id" db:"id"`
	JobID        int64      `json:"job_id" db:"job_id"`
	TaskID       *int64     `json:"task_id" db:"task_id"`
	AttemptToken *int64     `json:"attempt_token" db:"attempt_token"`
	WorkerID     *int64     `json:"worker_id" db:"worker_id"`
	Owner        string     `json:"owner" db:"owner"`
	Description  string     `json:"description" db:"description"`
	State        string     `json:"state" db:"state"`
	EndReason    *string    `json:"end_reason" db:"end_reason"`
	CreatedAt    time.Time  `json:"created_at" db:"created_at"`
	EndedAt      *time.Time `json:"ended_at" db:"ended_at"`
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

// ReadyCleanup lists the due records whose turn has come (in their operation's order, and
// by time unless ignoreBackoff), locked or not: a pass that finds them locked knows another
// cleaner is on them. opID 0 means every operation.
func (c *Catalog) ReadyCleanup(ctx context.Context, opID int64, ignoreBackoff bool) ([]int64, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT r.id FROM deckhand.cleanup_record r
		WHERE r.state = 'due' AND ($2 = 0 OR r.operation_id = $2)
		  AND (r.next_attempt_at <= coalesce($1, now()) OR $3)
		  AND NOT EXISTS (SELECT 1 FROM deckhand.cleanup_record e
		                  WHERE e.operation_id = r.operation_id AND e.rank < r.rank AND e.state IN ('pending', 'due'))
		ORDER BY r.id LIMIT 1000`, c.now(), opID, ignoreBackoff)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list ready cleanup records: %w", err)
	}
	return ids, nil
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
