package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// AttemptXact is the node transaction of a running attempt, about to commit.
type AttemptXact struct {
	TaskID int64
	Token  int64
	nodeconn.Xact
}

// RecordXacts makes the node transaction ids of running attempts durable before their
// transactions commit on the nodes (see migration 0007). It returns the ids of the tasks whose
// attempt is still current: an attempt not among them was taken over (its lease expired, the
// task was rescued) and must not commit.
func (c *Catalog) RecordXacts(ctx context.Context, xs []AttemptXact) (map[int64]bool, error) {
	ids := make([]int64, len(xs))
	tokens := make([]int64, len(xs))
	xids := make([]string, len(xs))
	timelines := make([]int64, len(xs))
	systems := make([]*int64, len(xs))
	for i, x := range xs {
		ids[i], tokens[i], xids[i], timelines[i], systems[i] = x.TaskID, x.Token, x.XID, x.Timeline, x.SystemID
	}
	// A task whose row a catalog role holds locked fails the statement after rowLockWait
	// (IsLockTimeout), rather than hold back the others: the caller records them one by one.
	current := map[int64]bool{}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(boundLockWait)
	b.Queue(`
		UPDATE deckhand.task t SET attempt_xid = r.xid::xid8, xid_token = r.token,
			xid_timeline = nullif(r.timeline, 0), xid_system = r.system
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[]) AS r(id, token, xid, timeline, system)
		WHERE t.id = r.id AND t.attempt_token = r.token AND t.state`+isActive+`
		RETURNING t.id`, ids, tokens, xids, timelines, systems).Query(func(rows pgx.Rows) error {
		var id int64
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			current[id] = true
			return nil
		})
		return err
	})
	b.Queue("COMMIT")
	if err := c.inTx(ctx, b); err != nil {
		return nil, fmt.Errorf("record node transactions: %w", err)
	}
	return current, nil
}

// AttemptXID is the node transaction attempt token of task recorded before committing, with
// an empty XID when it recorded none. Read it only once the attempt's backend is gone: until
// then the attempt may still record one, and commit.
func (c *Catalog) AttemptXID(ctx context.Context, taskID, token int64) (nodeconn.Xact, error) {
	var (
		xid      *string
		timeline *int64
		x        nodeconn.Xact
	)
	err := c.Pool.QueryRow(ctx, `
		SELECT attempt_xid::text, xid_timeline, xid_system
		FROM deckhand.task WHERE id = $1 AND xid_token = $2`,
		taskID, token).Scan(&xid, &timeline, &x.SystemID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nodeconn.Xact{}, nil
	}
	if err != nil {
		return nodeconn.Xact{}, fmt.Errorf("read the node transaction of task %d: %w", taskID, err)
	}
	if xid == nil {
		return nodeconn.Xact{}, nil
	}
	x.XID = *xid
	if timeline != nil {
		x.Timeline = *timeline
	}
	return x, nil
}
