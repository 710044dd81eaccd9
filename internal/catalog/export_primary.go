package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MoveExportCoordinator binds an export's coordinator task to node to, another member of the
// export's group, while attempt token of it runs: after a failover of the group the coordinator
// must hold its lock on the new primary, and its task was bound at submission to the old one.
// The attempt then ends (retried), and the next is claimed on to; the parts of the old epoch
// are superseded as after any lost coordinator. It reports false when the attempt is no
// longer current, or to is not a member of the group.
func (c *Catalog) MoveExportCoordinator(ctx context.Context, taskID, token int64, to string) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.task t SET node = n.name
		FROM deckhand.export e, deckhand.node n
		WHERE t.id = $1 AND t.attempt_token = $2 AND t.state = 'running' AND t.kind = 'export'
		  AND e.job_id = t.job_id AND n.name = $3 AND n.node_group = e.node_group`, taskID, token, to)
	if err != nil {
		return false, fmt.Errorf("move the coordinator of task %d to node %s: %w", taskID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Rebound is an export coordinator that RebindStrandedCoordinators moved.
type Rebound struct {
	TaskID int64  `db:"id"`
	From   string `db:"old_node"`
	To     string `db:"node"`
}

// RebindStrandedCoordinators binds the runnable export coordinators whose node is no longer
// registered (deckhand node remove of a primary that failed over, say) to their group's
// primary, when exactly one member is recorded primary and answered its latest probe. An
// export belongs to its group, not to the server that was primary when it began; failing it
// (ClaimStranded, which the leader runs next) for the removal of a server that no longer leads
// the group would throw away an export the group can finish. Coordinators whose group has no
// such primary are left to ClaimStranded.
func (c *Catalog) RebindStrandedCoordinators(ctx context.Context) ([]Rebound, error) {
	rows, _ := c.Pool.Query(ctx, rebindStrandedSQL)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Rebound])
	if err != nil {
		return nil, fmt.Errorf("rebind the export coordinators of removed nodes: %w", err)
	}
	return out, nil
}

// CoordinatorNode is the node the export's coordinator attempt token runs on, "" when that
// attempt is not the export's coordinator (any more).
func (c *Catalog) CoordinatorNode(ctx context.Context, exportID, token int64) (string, error) {
	var node *string
	err := c.Pool.QueryRow(ctx, `
		SELECT t.node FROM deckhand.export e JOIN deckhand.task t ON t.job_id = e.job_id
		WHERE e.id = $1 AND t.attempt_token = $2 AND t.kind = 'export'`, exportID, token).Scan(&node)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && node == nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the coordinator of export %d: %w", exportID, err)
	}
	return *node, nil
}

// ExportTimeline is the timeline of the primary that epoch's consistency point of the export
// was taken on: 0 when the point predates the record of timelines, or epoch is not the
// export's current one (its parts are refused for that anyway).
func (c *Catalog) ExportTimeline(ctx context.Context, exportID int64, epoch int) (int32, error) {
	var tli *int32
	err := c.Pool.QueryRow(ctx, `SELECT consistency_timeline FROM deckhand.export WHERE id = $1 AND epoch = $2`,
		exportID, epoch).Scan(&tli)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && tli == nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the consistency point of export %d: %w", exportID, err)
	}
	return *tli, nil
}

// rebindStrandedSQL is RebindStrandedCoordinators' statement. The leader runs it every round,
// and almost always nothing is stranded: the EXISTS, which has no column of the task table, is
// a test the plan makes once, before its join, so that no plan (the generic one made while the
// task table was empty, say, which scanned the whole table for the update's join: 6,074
// buffers, 44 ms, every second, with 300,000 finished tasks) reads the task table then.
const rebindStrandedSQL = `
		WITH stranded AS (
			-- From the runnable coordinators (task_runnable_export_idx, in its order), never
			-- from the exports or the nodes: the catalog keeps every export until retention.
			SELECT c.id, c.node AS old_node, p.name AS node
			FROM (SELECT t.id, t.job_id, t.node FROM deckhand.task t
				WHERE t.state = 'runnable' AND t.kind = 'export' AND t.node_group IS NULL
				  AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = t.node)
				ORDER BY t.node, t.claim_key, t.id LIMIT 1000 FOR UPDATE OF t SKIP LOCKED) c
			CROSS JOIN LATERAL (SELECT e.node_group FROM deckhand.export e WHERE e.job_id = c.job_id LIMIT 1) e
			-- The group's primary, when exactly one member is recorded primary and answered.
			CROSS JOIN LATERAL (SELECT min(n.name) AS name FROM deckhand.node n
				WHERE n.node_group = e.node_group AND n.role = 'primary' AND n.last_error IS NULL
				HAVING count(*) = 1) p
		)
		UPDATE deckhand.task t SET node = s.node FROM stranded s
		WHERE t.id = s.id AND t.state = 'runnable' AND EXISTS (SELECT 1 FROM stranded)
		RETURNING t.id, s.old_node, t.node`
