package catalog

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// maxClaimNodes bounds the nodes one claim locks: at most this many (and no more than the
// claim's limit) with runnable tasks of their own, and as many members of groups with runnable
// group tasks. Whatever the number of nodes registered, a claim reads and locks about what it
// takes.
const maxClaimNodes = 64

// lockNodesSQL locks the nodes a claim takes tasks from, without looking at every node: it
// walks the distinct nodes of the runnable node-bound sets (task_runnable_node_idx and
// task_runnable_export_idx, one probe of each per step: the least node above the last) from
// @start_node, a node name the caller picks at random, up to the last and then around from the
// first up to @start_node. Concurrent claimers so start in different places and lock different
// nodes; and every node with work is reached, however late its name sorts, by the claims that
// start before it or wrap around to it.
//
// Each step estimates what the node could give (its free slots, as many as it has runnable
// tasks, for tasks and for export coordinators apart) from the snapshot the statement started
// with, and locks the node FOR UPDATE SKIP LOCKED if it could give something. The walk stops
// once the estimates of the nodes it locked cover @limit, once it holds @nodes nodes, or after
// 2 * @nodes steps: a node another claimer holds, or that is full, costs a step and is passed,
// so that concurrent claimers that meet go on to other nodes, and a claim's cost stays bounded
// when most nodes are busy. The estimates only choose nodes: claimSQL counts again under the
// locks, with a snapshot taken after them. No lock is waited for, so the order of locking
// cannot deadlock.
//
// Groups with runnable group tasks are walked the same way over task_runnable_group_idx from
// @start_group; each step locks the group's members (node_group_member_idx, 0014) that have a
// free slot, and the walk stops once @limit of the tasks of groups it holds members of are seen,
// or it holds @nodes members; claimSQL deals the tasks over the members, and checks each one's
// replay position. A node is locked once, for its own tasks or as a member.
//
// Every probe orders by the key of the index it means to use and stops early: the index then
// serves both the filter and the order, and the plan a claim runs (generic, made once from
// whatever statistics there were) reads what it returns, whatever the planner believed about
// how many rows would match. Each step is subqueries fenced with OFFSET 0 (the planner would
// otherwise copy a probe into every expression that uses its result), and each lock a LATERAL
// subquery with FOR UPDATE, which is never flattened: the planner has no join order to choose.
//
// The runnable sets' indexes lead with claim_key (after the node or group): a job's submission
// time moved earlier by a minute per point of its priority (0011_job_control.sql). Claims take
// tasks in that order, ids breaking ties: higher priorities first, and the longer a task's job
// has waited, the earlier its place.
var lockNodesSQL = `
WITH RECURSIVE own_from_start(node, max_tasks, n, locks, total) AS (
	SELECT c.node, l.max_tasks, 1, (l.name IS NOT NULL)::int, CASE WHEN l.name IS NOT NULL THEN e.est ELSE 0 END
	FROM (` + nextOwnNode(`>= @start_node::text`) + ` OFFSET 0) c` + ownStep + `
	WHERE c.node IS NOT NULL
	UNION ALL
	SELECT c.node, l.max_tasks, w.n + 1, w.locks + (l.name IS NOT NULL)::int, w.total + CASE WHEN l.name IS NOT NULL THEN e.est ELSE 0 END
	FROM own_from_start w
	CROSS JOIN LATERAL (` + nextOwnNode(`> w.node`) + ` OFFSET 0) c` + ownStep + `
	WHERE c.node IS NOT NULL AND w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int
), own_wrapped(node, max_tasks, n, locks, total) AS (
	-- Around from the first node, as far as the walk may still go.
	SELECT c.node, l.max_tasks, s.n + 1, s.locks + (l.name IS NOT NULL)::int, s.total + CASE WHEN l.name IS NOT NULL THEN e.est ELSE 0 END
	FROM (SELECT coalesce(max(n), 0) AS n, coalesce(max(locks), 0) AS locks, coalesce(max(total), 0) AS total FROM own_from_start) s
	CROSS JOIN LATERAL (` + nextOwnNode(`IS NOT NULL`) + ` OFFSET 0) c` + ownStep + `
	WHERE c.node < @start_node::text AND s.total < @limit::int AND s.locks < @nodes::int AND s.n < 2 * @nodes::int
	UNION ALL
	SELECT c.node, l.max_tasks, w.n + 1, w.locks + (l.name IS NOT NULL)::int, w.total + CASE WHEN l.name IS NOT NULL THEN e.est ELSE 0 END
	FROM own_wrapped w
	CROSS JOIN LATERAL (` + nextOwnNode(`> w.node`) + ` OFFSET 0) c` + ownStep + `
	WHERE c.node < @start_node::text AND w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int
), own AS (
	SELECT node, max_tasks FROM own_from_start WHERE max_tasks IS NOT NULL
	UNION ALL SELECT node, max_tasks FROM own_wrapped WHERE max_tasks IS NOT NULL
), groups_from_start(node_group, members, caps, n, locks, total) AS (
	SELECT c.node_group, m.members, m.caps, 1, cardinality(m.members), CASE WHEN cardinality(m.members) > 0 THEN e.est ELSE 0 END
	FROM (SELECT ` + nextGroup(`>= @start_group::text`) + ` AS node_group OFFSET 0) c` + groupStep(`0`) + `
	WHERE c.node_group IS NOT NULL
	UNION ALL
	SELECT c.node_group, m.members, m.caps, w.n + 1, w.locks + cardinality(m.members),
		w.total + CASE WHEN cardinality(m.members) > 0 THEN e.est ELSE 0 END
	FROM groups_from_start w
	CROSS JOIN LATERAL (SELECT ` + nextGroup(`> w.node_group`) + ` AS node_group OFFSET 0) c` + groupStep(`w.locks`) + `
	WHERE c.node_group IS NOT NULL AND w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int
), groups_wrapped(node_group, members, caps, n, locks, total) AS (
	SELECT c.node_group, m.members, m.caps, s.n + 1, s.locks + cardinality(m.members),
		s.total + CASE WHEN cardinality(m.members) > 0 THEN e.est ELSE 0 END
	FROM (SELECT coalesce(max(n), 0) AS n, coalesce(max(locks), 0) AS locks, coalesce(max(total), 0) AS total FROM groups_from_start) s
	CROSS JOIN LATERAL (SELECT ` + nextGroup(`IS NOT NULL`) + ` AS node_group OFFSET 0) c` + groupStep(`s.locks`) + `
	WHERE c.node_group < @start_group::text AND s.total < @limit::int AND s.locks < @nodes::int AND s.n < 2 * @nodes::int
	UNION ALL
	SELECT c.node_group, m.members, m.caps, w.n + 1, w.locks + cardinality(m.members),
		w.total + CASE WHEN cardinality(m.members) > 0 THEN e.est ELSE 0 END
	FROM groups_wrapped w
	CROSS JOIN LATERAL (SELECT ` + nextGroup(`> w.node_group`) + ` AS node_group OFFSET 0) c` + groupStep(`w.locks`) + `
	WHERE c.node_group < @start_group::text AND w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int
), locked AS (
	SELECT node AS name, max_tasks FROM own
	UNION ALL
	SELECT m.name, m.max_tasks
	FROM (SELECT members, caps FROM groups_from_start UNION ALL SELECT members, caps FROM groups_wrapped) g,
		unnest(g.members, g.caps) AS m(name, max_tasks)
), inputs AS (
	SELECT coalesce(array_agg(name), '{}') AS nodes, coalesce(array_agg(max_tasks), '{}') AS caps,
		coalesce((SELECT value::int FROM deckhand.setting WHERE name = 'max_running_tasks'), 0) AS global
	FROM locked
)
-- The claim reads what this statement locked from the transaction's settings: it runs in the
-- same round trip, and may count only on nodes locked before its snapshot was taken. A global
-- cap needs one serialization point, taken once the node locks are held.
SELECT pg_catalog.set_config('deckhand.claim_nodes', nodes::text, true), pg_catalog.set_config('deckhand.claim_caps', caps::text, true),
	pg_catalog.set_config('deckhand.claim_global', global::text, true),
	CASE WHEN global > 0 THEN pg_catalog.pg_advisory_xact_lock(7306086::pg_catalog.int8) END
FROM inputs`

// ownStep estimates what node c.node could give (e.est) and locks it if it could give something
// (l, without a row if not or if another claimer holds it).
var ownStep = `
	CROSS JOIN LATERAL (` + ownEstimate + ` OFFSET 0) e
	LEFT JOIN LATERAL (SELECT n.name, n.max_tasks FROM deckhand.node n WHERE n.name = c.node AND e.est > 0
		FOR UPDATE OF n SKIP LOCKED) l ON true`

// groupStep counts the runnable tasks of group c.node_group (e.est, up to the claim's limit)
// and locks the group's members that have a free slot, as many as the claim may still lock
// after held, into m.members and m.caps. A node locked for its own tasks is not one of them.
func groupStep(held string) string {
	return `
	CROSS JOIN LATERAL (` + groupEstimate + ` OFFSET 0) e
	CROSS JOIN LATERAL (SELECT coalesce(array_agg(l.name), '{}') AS members, coalesce(array_agg(l.max_tasks), '{}') AS caps FROM (
		SELECT n.name, n.max_tasks
		FROM (SELECT m.name FROM deckhand.node m WHERE m.node_group = c.node_group ORDER BY m.name LIMIT 2 * @nodes::int) m
		CROSS JOIN LATERAL (SELECT n.name, n.max_tasks FROM deckhand.node n
			WHERE n.name = m.name AND n.name <> ALL (ARRAY(SELECT node FROM own)) AND ` + running(`<>`) + ` < n.max_tasks
			FOR UPDATE OF n SKIP LOCKED) n
		LIMIT greatest(@nodes::int - ` + held + `, 0)) l) m`
}

var lockNodesStmt = mustNamed(lockNodesSQL)

// nextOwnNode is the least node, t.node <bound>, with runnable tasks of its own (node), with
// the least of each of the two indexes of tasks bound to a node (tasks, coordinators): one probe
// of each. The walks' estimates count only the kinds a node has.
func nextOwnNode(bound string) string {
	return `SELECT least(p.tasks, p.coordinators) AS node, p.tasks, p.coordinators FROM (SELECT
		(SELECT t.node FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export' AND t.node ` + bound + `
		 ORDER BY t.node LIMIT 1) AS tasks,
		(SELECT t.node FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export' AND t.node IS NOT NULL AND t.node ` + bound + `
		 ORDER BY t.node LIMIT 1) AS coordinators OFFSET 0) p`
}

// nextGroup is the least node group, t.node_group <bound>, with runnable group tasks.
func nextGroup(bound string) string {
	return `(SELECT t.node_group FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NOT NULL AND t.node_group ` + bound + `
		 ORDER BY t.node_group LIMIT 1)`
}

// ownEstimate is what node c.node could give a claim, tasks and export coordinators apart (see
// claimSQL): its free slots, as many as it has runnable tasks. Counting stops at the cap.
var ownEstimate = `SELECT coalesce((SELECT
		CASE WHEN c.tasks = c.node THEN least(n.max_tasks - ` + running(`<>`) + `, ` + runnable(`<>`) + `) ELSE 0 END +
		CASE WHEN c.coordinators = c.node THEN least(n.max_tasks - ` + running(`=`) + `, ` + runnable(`=`) + `) ELSE 0 END
	FROM deckhand.node n WHERE n.name = c.node), 0)::int AS est`

// groupEstimate is how many runnable tasks group c.node_group has, counted up to the claim's limit.
const groupEstimate = `SELECT (SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group = c.node_group ORDER BY t.claim_key, t.id LIMIT @limit::int) r)::int AS est`

// running counts the tasks (kind <> 'export') or coordinators (kind = 'export') running on node
// n, up to its cap.
func running(kind string) string {
	return `(SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.node = n.name AND t.state IN ('running', 'cancelling') AND t.kind ` + kind + ` 'export' ORDER BY t.id LIMIT n.max_tasks) r)::int`
}

// runnable counts node n's runnable tasks or coordinators, up to its cap.
func runnable(kind string) string {
	return `(SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = n.name AND t.kind ` + kind + ` 'export'
		ORDER BY t.claim_key, t.id LIMIT n.max_tasks) r)::int`
}

// claimStarts holds the names of the nodes and node groups, read at most every
// claimStartsMaxAge, from which each claim picks where its walks start.
type claimStarts struct {
	mu     sync.Mutex
	read   time.Time
	nodes  []string
	groups []string
}

const claimStartsMaxAge = 10 * time.Second

// claimStart picks, at random, a registered node and a node group for the claim's walks to
// start from. Any name would do for correctness (the walks wrap around); names of registered
// nodes spread concurrent claimers over the nodes as they are, whatever their names look like.
// The names are read again every claimStartsMaxAge: one read of the node table per worker
// every few seconds, never one per claim.
func (c *Catalog) claimStart(ctx context.Context, conn *pgx.Conn) (node, group string, err error) {
	s := &c.starts
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read.IsZero() || time.Since(s.read) > claimStartsMaxAge {
		var nodes, groups []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(name ORDER BY name), '{}'), coalesce(array_agg(DISTINCT node_group ORDER BY node_group), '{}')
			FROM deckhand.node`).Scan(&nodes, &groups); err != nil {
			return "", "", err
		}
		s.nodes, s.groups, s.read = nodes, groups, time.Now()
	}
	random := c.Rand
	if random == nil {
		random = rand.Float64
	}
	pick := func(names []string) string {
		if len(names) == 0 {
			return ""
		}
		return names[min(len(names)-1, int(random()*float64(len(names))))]
	}
	return pick(s.nodes), pick(s.groups), nil
}
