package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Stranded is a task taken by ClaimStranded: it waited for a node that is no longer registered.
type Stranded struct {
	TaskID int64   `db:"id"`
	Token  int64   `db:"attempt_token"`
	Node   string  `db:"node"`       // "" for a task bound to a node group
	Group  *string `db:"node_group"` // the group of a task bound to one: it has no node left
}

// StrandedWalkNodes bounds the nodes with runnable tasks one ClaimStranded call looks at. The
// leader calls it every round, and almost always no node is gone: over 10,000 nodes with work,
// a walk of them all read about 50,000 buffers and took 120–150 ms, every second. A round
// instead goes on from where the last stopped, so a fleet of N such nodes is walked every
// N/StrandedWalkNodes rounds, and a round's cost does not grow with the fleet.
const StrandedWalkNodes = 256

// ClaimStranded takes, for worker (the leader), up to 1,000 runnable tasks bound to a node that
// is no longer registered (deckhand node remove), or to a node group that has no node left (an
// export's parts, once every member is removed): no claim ever picks them, since a worker
// reaches a node through its registered conninfo only, so they would keep their jobs running
// for ever. The caller fails each through Complete, which unschedules its dependents; a
// leader that dies in between leaves them to the rescue, as any dead worker's tasks.
//
// The nodes come from the runnable indexes one probe each (a loose index scan), so that a
// queue of many tasks on few nodes costs few reads: StrandedWalkNodes of them, in name order,
// from the node named from ("" for the first) on. next is where the following call starts: ""
// once the walk reached the last node. Node groups with runnable group tasks (exports' parts,
// a handful) are all looked at every call.
func (c *Catalog) ClaimStranded(ctx context.Context, worker int64, from string) (tasks []Stranded, next string, err error) {
	rows, _ := c.Pool.Query(ctx, claimStrandedSQL, worker, c.now(), from, StrandedWalkNodes)
	var (
		id, token   *int64
		node, group *string
		nextNode    *string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &token, &node, &group, &nextNode}, func() error {
		if id == nil { // the row that says where the next round starts
			if nextNode != nil {
				next = *nextNode
			}
			return nil
		}
		tasks = append(tasks, Stranded{TaskID: *id, Token: *token, Node: *node, Group: group})
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("claim the tasks of removed nodes: %w", err)
	}
	return tasks, next, nil
}

// claimStrandedSQL is ClaimStranded's statement: $1 the leader's worker id, $2 the injected
// time or NULL, $3 the node the walks start from, $4 how many nodes each walks at most.
const claimStrandedSQL = `
		WITH RECURSIVE queued(node, n) AS (
			(SELECT t.node, 1 FROM deckhand.task t
			 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export'
			   AND t.node >= $3::text
			 ORDER BY t.node LIMIT 1)
			UNION ALL
			SELECT (SELECT t.node FROM deckhand.task t
			        WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export'
			          AND t.node > q.node ORDER BY t.node LIMIT 1), q.n + 1
			FROM queued q WHERE q.node IS NOT NULL AND q.n < $4::int
		), coordinators(node, n) AS (
			(SELECT t.node, 1 FROM deckhand.task t
			 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind = 'export'
			   AND t.node >= $3::text
			 ORDER BY t.node LIMIT 1)
			UNION ALL
			SELECT (SELECT t.node FROM deckhand.task t
			        WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export'
			          AND t.node > q.node ORDER BY t.node LIMIT 1), q.n + 1
			FROM coordinators q WHERE q.node IS NOT NULL AND q.n < $4::int
		), groups(node_group) AS (
			(SELECT t.node_group FROM deckhand.task t
			 WHERE t.state = 'runnable' AND t.node_group IS NOT NULL
			 ORDER BY t.node_group LIMIT 1)
			UNION ALL
			SELECT (SELECT t.node_group FROM deckhand.task t
			        WHERE t.state = 'runnable' AND t.node_group IS NOT NULL AND t.node_group > q.node_group
			        ORDER BY t.node_group LIMIT 1)
			FROM groups q WHERE q.node_group IS NOT NULL
		), gone AS MATERIALIZED (
			SELECT q.node FROM (SELECT node FROM queued UNION SELECT node FROM coordinators) q
			WHERE q.node IS NOT NULL AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = q.node)
		), gone_groups AS MATERIALIZED (
			SELECT q.node_group FROM groups q
			WHERE q.node_group IS NOT NULL AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.node_group = q.node_group)
		), picked AS (
			-- From each gone node through the runnable index of its tasks, never from the
			-- task table in id order: with no node gone (the usual round) that would read every
			-- task the catalog keeps, finished ones included.
			SELECT p.id FROM (
				SELECT x.id FROM gone g CROSS JOIN LATERAL (
					SELECT t.id FROM deckhand.task t
					WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export'
					  AND t.node = g.node
					LIMIT 1000 FOR UPDATE SKIP LOCKED) x
				UNION ALL
				-- An export's coordinator whose group has one primary is moved there
				-- (RebindStrandedCoordinators), not failed: one that became runnable since
				-- that round (its job resumed in between) waits for the next.
				SELECT x.id FROM gone g CROSS JOIN LATERAL (
					SELECT t.id FROM deckhand.task t
					WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export' AND t.node = g.node
					  AND NOT EXISTS (
						SELECT 1 FROM deckhand.export e WHERE e.job_id = t.job_id
						  AND (SELECT count(*) FROM deckhand.node n WHERE n.node_group = e.node_group
						       AND n.role = 'primary' AND n.last_error IS NULL) = 1)
					LIMIT 1000 FOR UPDATE SKIP LOCKED) x
				UNION ALL
				SELECT x.id FROM gone_groups g CROSS JOIN LATERAL (
					SELECT t.id FROM deckhand.task t
					WHERE t.state = 'runnable' AND t.node_group = g.node_group
					LIMIT 1000 FOR UPDATE SKIP LOCKED) x
			) p LIMIT 1000
		), taken AS (
			UPDATE deckhand.task t SET state = 'running', attempts = t.attempts + 1, runs = t.runs + 1,
				attempt_token = nextval('deckhand.attempt_token_seq'), worker_id = $1,
				started_at = coalesce($2, clock_timestamp()), finished_at = NULL, queued = false
			FROM picked p WHERE t.id = p.id AND t.state = 'runnable'
			RETURNING t.id, t.attempt_token, coalesce(t.node, '') AS node, t.node_group
		)
		SELECT id, attempt_token, node, node_group, NULL::text AS next_node FROM taken
		UNION ALL
		-- Where the next round starts: the last node of a walk that stopped at its bound
		-- (looked at again then), the lesser of the two; NULL once both reached the end.
		SELECT NULL, NULL, NULL, NULL, least((SELECT q.node FROM queued q WHERE q.n = $4::int),
			(SELECT q.node FROM coordinators q WHERE q.n = $4::int))`
