package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// DueRecord is a due cleanup record claimed for one removal attempt.
type DueRecord struct {
	ID          int64                     `db:"id"`
	OperationID int64                     `db:"operation_id"`
	JobID       int64                     `db:"job_id"`
	Type        deckhandtype.ResourceType `db:"resource_type"`
	Node        *string                   `db:"node"`
	NodeDSN     *string                   `db:"node_dsn"` // nil when the node is no longer registered
	Location    string                    `db:"location"`
	Name        string                    `db:"name"`
	Policy      deckhandtype.Policy       `db:"policy"`
	Owner       string                    `db:"owner"`
	SubmittedBy string                    `db:"submitted_by"` // the job's submitter, who must be a member of Owner on the node
	Attempts    int                       `db:"attempts"`
	Errors      int                       `db:"errors"`
	PinnedBy    *string                   `db:"pinned_by"`
}

// Resource is the record's resource.
func (d *DueRecord) Resource() deckhandtype.CleanupResource {
	r := deckhandtype.CleanupResource{Type: d.Type, Location: d.Location, Name: d.Name}
	if d.Node != nil {
		r.Node = *d.Node
	}
	return r
}

// CleanupOutcome is what one removal attempt found.
type CleanupOutcome struct {
	// State is CleanupRemoved, CleanupFailed, CleanupNodeRemoved, or a wait reason
	// (CleanupInUse, CleanupRetrying, CleanupPinned) that keeps the record due.
	State   deckhandtype.CleanupState
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
			  AND (r.next_attempt_at <= coalesce(@now, now()) OR r.id = ANY (@force) OR @ignore_backoff)
			  AND (@op::bigint IS NULL OR r.operation_id = @op)
			  AND r.id <> ALL (@skip)
			  AND `+turnSQL+`
			ORDER BY r.operation_id, r.rank, r.id
			LIMIT 1
			FOR UPDATE OF r SKIP LOCKED`,
			pgx.StrictNamedArgs{"now": c.now(), "force": nonNil(sel.Force), "op": opArg, "skip": nonNil(sel.Skip),
				"ignore_backoff": sel.IgnoreBackoff})
		got, err := pgx.CollectRows(rows, pgx.RowToStructByName[DueRecord])
		if err != nil || len(got) == 0 {
			return err
		}
		rec = &got[0]
		out = fn(ctx, rec)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		final := out.State == deckhandtype.CleanupRemoved || out.State == deckhandtype.CleanupFailed || out.State == deckhandtype.CleanupNodeRemoved
		_, err = tx.Exec(ctx, `
			UPDATE deckhand.cleanup_record SET
				state = CASE WHEN @final THEN @found ELSE 'due' END,
				wait_reason = CASE WHEN @final THEN NULL ELSE @found END,
				attempts = attempts + CASE WHEN @found IN ('pinned', 'node_removed') THEN 0 ELSE 1 END,
				errors = errors + CASE WHEN @found IN ('retrying', 'failed') THEN 1 ELSE 0 END,
				last_error = coalesce(deckhand.redact(nullif(@error, '')), CASE WHEN @found = 'removed' THEN last_error END),
				next_attempt_at = coalesce(@now, now()) + @backoff::interval,
				ended_at = CASE WHEN @final THEN coalesce(@now, now()) END
			WHERE id = @id`,
			pgx.StrictNamedArgs{"id": rec.ID, "found": out.State, "error": out.Error, "backoff": out.Backoff, "now": c.now(), "final": final})
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

// turnSQL holds for a record r whose turn has come in its operation's removal order: no record
// of the same operation with a lower rank (see deckhand.cleanup_record.rank) is still pending
// or due. It stays a fragment rather than a SQL function: written out, NOT EXISTS becomes an
// anti-join; behind a function it is a filter the planner misjudges, and ClaimCleanup of one
// operation turned into a walk over every operation.
const turnSQL = `NOT EXISTS (SELECT 1 FROM deckhand.cleanup_record e
	WHERE e.operation_id = r.operation_id AND e.rank < r.rank AND e.state IN ('pending', 'due'))`

// WaitingRecord is a due record that found its resource in use and waits for its next
// attempt; the cleaner probes its node and retries it early once nothing holds it.
type WaitingRecord struct {
	ID      int64                     `db:"id"`
	Type    deckhandtype.ResourceType `db:"resource_type"`
	Node    string                    `db:"node"`
	NodeDSN string                    `db:"node_dsn"`
	Owner   string                    `db:"owner"`
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
		  AND `+turnSQL+`
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

// ReadyCleanup lists the due records whose turn has come (in their operation's order, and
// by time unless ignoreBackoff), locked or not: a pass that finds them locked knows another
// cleaner is on them. opID 0 means every operation.
func (c *Catalog) ReadyCleanup(ctx context.Context, opID int64, ignoreBackoff bool) ([]int64, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT r.id FROM deckhand.cleanup_record r
		WHERE r.state = 'due' AND ($2 = 0 OR r.operation_id = $2)
		  AND (r.next_attempt_at <= coalesce($1, now()) OR $3)
		  AND `+turnSQL+`
		ORDER BY r.id LIMIT 1000`, c.now(), opID, ignoreBackoff)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list ready cleanup records: %w", err)
	}
	return ids, nil
}
