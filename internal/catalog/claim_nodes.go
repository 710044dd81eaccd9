package catalog

import (
	"context"
	"math/rand/v2"
	"strings"
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
// Each step locks its node FOR UPDATE SKIP LOCKED and, if it got it, estimates what the node
// could give (its free slots, as many as it has tasks runnable now — not waiting out a
// backoff —, for tasks and for export coordinators apart, from the statement's snapshot). The
// walk stops once the estimates of the nodes it locked cover @limit, once it holds @nodes nodes
// that can give something, or after 2 * @nodes + 8 steps: a node another claimer holds costs a
// step and is passed unread, so that concurrent claimers that meet go on to other nodes, and a
// claim's cost stays bounded when most nodes are busy (a full node, or one whose tasks all wait
// out a backoff, stays locked, for nothing, until the claim commits, and the walk goes on). The estimates only choose nodes: claimSQL
// counts again under the locks, with a snapshot taken after them, and keeps every rule as it
// did when every node with work was locked (each node's max_tasks, coordinators' slots of their
// own, the global max_running_tasks, group members' replay positions, claim_key order within a
// node): it only sees fewer nodes. No lock is waited for, so the order of locking cannot
// deadlock.
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
// tasks in that order: higher priorities first, and the longer a task's job has waited, the
// earlier its place. Among tasks of one claim_key, a node's are taken by id; those that run
// anywhere from a random place on (claimSQL's anywhere_head).
var lockNodesSQL = lockNodesSQLFor(allSets)

// lockNodesSQLFor is lockNodesSQL for a claim of the sets s (normalized): the walk over nodes
// probes the indexes of the node-bound sets in s alone, and groups are walked only for
// setGroups; a claim of no node-bound set locks no node. A set left out may have work all the
// same: the claim statement of the same sets claims nothing then (claimInputs), and the worker
// claims again from the sets found. So a worker whose claims find node-bound tasks alone plans
// and runs no probe of export coordinators or groups: the whole walk took 2.3 ms to plan on an
// idle server, 18–40 ms on a busy one, and a plan is made again on each connection after every
// invalidation (an ANALYZE of the task table, say).
func lockNodesSQLFor(s claimSets) string {
	if s = s.normalized(); s&(setNodes|setCoordinators) == 0 {
		return lockNoNodeSQL
	}
	sql := `
WITH RECURSIVE own_walk(node, max_tasks, est, wrapped, n, locks, total) AS (
	SELECT NULL::text, NULL::int, 0, false, 0, 0, 0
	UNION ALL
	SELECT c.node, l.max_tasks, e.est, c.wrapped, w.n + 1, w.locks + (e.est > 0)::int, w.total + e.est
	FROM own_walk w
	CROSS JOIN LATERAL (SELECT CASE WHEN w.n = 0 THEN ` + nextOwnNode(s, `>= @start_node::text`) + `
		ELSE ` + nextOwnNode(s, `> w.node`) + ` END AS up OFFSET 0) u
	-- Past the last node, around from the first.
	CROSS JOIN LATERAL (SELECT coalesce(u.up, CASE WHEN NOT w.wrapped THEN ` + nextOwnNode(s, `IS NOT NULL`) + ` END) AS node,
		w.wrapped OR u.up IS NULL AS wrapped OFFSET 0) c` + ownStep(s) + `
	WHERE w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int + 8
		AND c.node IS NOT NULL AND NOT (c.wrapped AND c.node >= @start_node::text)
), own AS (
	-- Full nodes stay locked to the end of the claim, which passes them.
	SELECT node, max_tasks FROM own_walk WHERE est > 0
)`
	locked := `, locked AS (
	SELECT node AS name, max_tasks FROM own`
	if s&setGroups != 0 {
		sql += `, group_walk(node_group, members, caps, wrapped, n, locks, total) AS (
	SELECT NULL::text, '{}'::text[], '{}'::int[], false, 0, 0, 0
	UNION ALL
	SELECT c.node_group, m.members, m.caps, c.wrapped, w.n + 1, w.locks + cardinality(m.members), w.total + e.est
	FROM group_walk w
	CROSS JOIN LATERAL (SELECT CASE WHEN w.n = 0 THEN ` + nextGroup(`>= @start_group::text`) + `
		ELSE ` + nextGroup(`> w.node_group`) + ` END AS up OFFSET 0) u
	CROSS JOIN LATERAL (SELECT coalesce(u.up, CASE WHEN NOT w.wrapped THEN ` + nextGroup(`IS NOT NULL`) + ` END) AS node_group,
		w.wrapped OR u.up IS NULL AS wrapped OFFSET 0) c` + groupStep + `
	WHERE w.total < @limit::int AND w.locks < @nodes::int AND w.n < 2 * @nodes::int + 8
		AND c.node_group IS NOT NULL AND NOT (c.wrapped AND c.node_group >= @start_group::text)
)`
		locked += `
	UNION ALL
	SELECT m.name, m.max_tasks FROM group_walk g, unnest(g.members, g.caps) AS m(name, max_tasks)`
	}
	return sql + locked + `
), inputs AS (
	SELECT coalesce(array_agg(name), '{}') AS nodes, coalesce(array_agg(max_tasks), '{}') AS caps,
		` + globalCap + ` AS global
	FROM locked
)` + lockedTail
}

// lockNoNodeSQL is the statement of a claim of no node-bound set: it locks no node, and finds
// the sets with work and the global cap as the others do.
var lockNoNodeSQL = `
WITH inputs AS (
	SELECT '{}'::text[] AS nodes, '{}'::int[] AS caps, ` + globalCap + ` AS global
)` + lockedTail

// globalCap is the catalog-wide max_running_tasks, 0 for none.
const globalCap = `coalesce((SELECT value::int FROM deckhand.setting WHERE name = 'max_running_tasks'), 0)`

// lockedTail ends both statements that lock nodes: inputs holds the nodes locked, their caps
// and the global cap. It also finds which sets of runnable tasks have any (claimSetsSQL), for
// the claim statement to check and the caller to read (the last column).
var lockedTail = `, sets AS (
	SELECT ` + claimSetsSQL + ` AS bits
)
-- The claim reads what this statement locked from the transaction's settings: it runs in the
-- same round trip, and may count only on nodes locked before its snapshot was taken. A global
-- cap needs one serialization point, taken once the node locks are held: the setting's row,
-- which only workers may lock. (An advisory lock, which any role that may connect to the
-- catalog's database may take and keep, let such a role stop every claim.)
SELECT pg_catalog.set_config('deckhand.claim_nodes', nodes::text, true), pg_catalog.set_config('deckhand.claim_caps', caps::text, true),
	pg_catalog.set_config('deckhand.claim_global', global::text, true), pg_catalog.set_config('deckhand.claim_sets', sets.bits::text, true),
	CASE WHEN global > 0 THEN (SELECT 1 FROM deckhand.setting s WHERE s.name = 'max_running_tasks' FOR UPDATE) END,
	sets.bits
FROM inputs, sets`

// ownStep locks node c.node (l, without a row if another claimer holds it: the walk passes it
// unread) and estimates what it could give the claim beyond w.total (e.est, 0 when it is not
// locked): its runnable tasks and export coordinators, counted up to its cap and to what the
// claim still needs (r), each kind within its free slots (see claimSQL), which are counted only
// for a kind the node has work of.
//
// Only the kinds of s are counted (setNodes: tasks, setCoordinators: export coordinators); the
// other's count is the constant 0, which the planner folds away with its running count.
func ownStep(s claimSets) string {
	count := func(kind string) string {
		return `(SELECT count(*) FROM (SELECT FROM deckhand.task t
			WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = l.name AND t.kind ` + kind + `
			  AND t.not_before <= coalesce(@now, now())
			ORDER BY t.claim_key, t.id LIMIT greatest(least(l.max_tasks, @limit::int - w.total), 0)) x)`
	}
	tasks, coordinators := `0`, `0`
	if s&setNodes != 0 {
		tasks = count(`<> 'export'`)
	}
	if s&setCoordinators != 0 {
		coordinators = count(`= 'export'`)
	}
	return `
	LEFT JOIN LATERAL (SELECT n.name, n.max_tasks FROM deckhand.node n WHERE n.name = c.node
		FOR UPDATE OF n SKIP LOCKED) l ON true
	CROSS JOIN LATERAL (SELECT CASE WHEN l.name IS NOT NULL THEN ` + tasks + ` ELSE 0 END AS tasks,
		CASE WHEN l.name IS NOT NULL THEN ` + coordinators + ` ELSE 0 END AS coordinators
		OFFSET 0) r
	CROSS JOIN LATERAL (SELECT (CASE WHEN r.tasks > 0 THEN least(l.max_tasks - ` + runningOn + `, r.tasks) ELSE 0 END +
		CASE WHEN r.coordinators > 0 THEN least(l.max_tasks - ` + coordinatingOn + `, r.coordinators) ELSE 0 END)::int AS est
		OFFSET 0) e`
}

// groupStep locks the members of group c.node_group that have a free slot (none locked for
// their own tasks), as many as the claim may still lock, into m.members and m.caps, and counts
// the group's runnable tasks up to what the claim still needs (e.est, 0 when it holds no member).
const groupStep = `
	CROSS JOIN LATERAL (SELECT coalesce(array_agg(l.name), '{}') AS members, coalesce(array_agg(l.max_tasks), '{}') AS caps FROM (
		SELECT l.name, l.max_tasks
		-- A standby is a candidate once it has replayed past the group's first task (claimSQL
		-- checks each task): lagging standbys, however many, never crowd out the rest. A member
		-- whose latest probe failed is none (claimSQL says why).
		FROM (SELECT m.name FROM deckhand.node m WHERE m.node_group = c.node_group AND m.last_error IS NULL
			AND (m.role = 'primary' OR m.replay_lsn >= (SELECT t.min_lsn FROM deckhand.task t
				WHERE t.state = 'runnable' AND t.node_group = c.node_group ORDER BY t.claim_key, t.id LIMIT 1))
			ORDER BY m.name LIMIT 2 * @nodes::int + 8) m
		CROSS JOIN LATERAL (SELECT l.name, l.max_tasks FROM deckhand.node l
			WHERE l.name = m.name AND l.name <> ALL (ARRAY(SELECT node FROM own)) AND ` + runningOn + ` < l.max_tasks
			FOR UPDATE OF l SKIP LOCKED) l
		LIMIT greatest(@nodes::int - w.locks, 0)) l) m
	CROSS JOIN LATERAL (SELECT CASE WHEN cardinality(m.members) > 0 THEN (SELECT count(*) FROM (SELECT FROM deckhand.task t
			WHERE t.state = 'runnable' AND t.node_group = c.node_group AND t.not_before <= coalesce(@now, now())
			ORDER BY t.claim_key, t.id LIMIT greatest(@limit::int - w.total, 0)) x) ELSE 0 END::int AS est OFFSET 0) e`

// nextOwnNode is the least node, t.node <bound>, with runnable tasks of its own in the
// node-bound sets of s: the least of one probe of each of their indexes.
func nextOwnNode(s claimSets, bound string) string {
	tasks := `(SELECT t.node FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export' AND t.node ` + bound + `
		 ORDER BY t.node LIMIT 1)`
	coordinators := `(SELECT t.node FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export' AND t.node IS NOT NULL AND t.node ` + bound + `
		 ORDER BY t.node LIMIT 1)`
	switch {
	case s&setNodes != 0 && s&setCoordinators != 0:
		return `least(` + tasks + `, ` + coordinators + `)`
	case s&setNodes != 0:
		return tasks
	default:
		return coordinators
	}
}

// nextGroup is the least node group, t.node_group <bound>, with runnable group tasks.
func nextGroup(bound string) string {
	return `(SELECT t.node_group FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node_group IS NOT NULL AND t.node_group ` + bound + `
		 ORDER BY t.node_group LIMIT 1)`
}

// runningOn and coordinatingOn count the tasks and the export coordinators running on node l
// (a locked row of deckhand.node), up to its cap, as claimSQL counts them again under the lock.
const (
	runningOn = `(SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.node = l.name AND t.state IN ('running', 'cancelling') AND NOT t.queued AND t.kind <> 'export' ORDER BY t.id LIMIT l.max_tasks) x)`
	coordinatingOn = `(SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.node = l.name AND t.state IN ('running', 'cancelling') AND NOT t.queued AND t.kind = 'export' ORDER BY t.id LIMIT l.max_tasks) x)`
)

// fewNodes is the most nodes for which a claim looks at every node (lockEveryNodeSQL) rather
// than walking some of them (lockNodesSQL). On a small fleet a probe per node costs less than
// the walk's steps and estimates (a claim on one node took 0.3 ms more with the walk, which the
// chain hand-off and SQL tasks on one node paid on every claim), and priorities hold exactly
// across nodes; on a large one the walk keeps a claim's cost to what it takes.
const fewNodes = 64

// lockEveryNodeSQL locks every node that has runnable work of its own or of its group, found
// by a probe per node (LATERAL ... LIMIT 1 is never turned into a scan of every runnable
// task), and leaves what it locked in the transaction's settings as lockNodesSQL does.
var lockEveryNodeSQL = lockEveryNodeSQLFor(allSets)

// lockEveryNodeSQLFor is lockEveryNodeSQL for a claim of the sets s (normalized): each node is
// probed for work of the node-bound sets in s alone (as lockNodesSQLFor walks them).
func lockEveryNodeSQLFor(s claimSets) string {
	s = s.normalized()
	var probes []string
	if s&setNodes != 0 {
		probes = append(probes, `(SELECT t.id FROM deckhand.task t
		 WHERE t.node = n.name AND t.state = 'runnable' AND t.node_group IS NULL AND t.kind <> 'export'
		 ORDER BY t.claim_key, t.id LIMIT 1)`)
	}
	if s&setCoordinators != 0 {
		probes = append(probes, `(SELECT t.id FROM deckhand.task t
		 WHERE t.node = n.name AND t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export'
		 ORDER BY t.claim_key, t.id LIMIT 1)`)
	}
	if s&setGroups != 0 {
		probes = append(probes, `(SELECT t.id FROM deckhand.task t
		 WHERE t.node_group = n.node_group AND t.state = 'runnable' AND t.node_group IS NOT NULL
		 ORDER BY t.claim_key, t.id LIMIT 1)`)
	}
	if len(probes) == 0 {
		return lockNoNodeSQL
	}
	probe := probes[0] // already (SELECT ... LIMIT 1); of several, the first that finds one
	if len(probes) > 1 {
		probe = `(
		` + strings.Join(probes, `
		UNION ALL
		`) + `
		LIMIT 1)`
	}
	return `
WITH locked AS (
	SELECT n.name, n.max_tasks FROM deckhand.node n
	CROSS JOIN LATERAL ` + probe + ` w
	ORDER BY n.name FOR UPDATE OF n SKIP LOCKED
), inputs AS (
	-- From @start_node, around: the claim takes the nodes' tasks in this order, so that a claim
	-- that cannot take every node's share does not always serve the same nodes first.
	SELECT coalesce(array_agg(name ORDER BY name >= @start_node::text DESC, name), '{}') AS nodes,
		coalesce(array_agg(max_tasks ORDER BY name >= @start_node::text DESC, name), '{}') AS caps,
		` + globalCap + ` AS global
	FROM locked
)` + lockedTail
}

// lockStatement is what locks the nodes for a claim of some sets: walking them (more than
// fewNodes nodes) or looking at every node.
type lockStatement struct{ walk, every named }

// lockStatements are the node-locking statements by the node-bound part of a normalized set
// (nodeBound): what claimStatements are to the claim.
var lockStatements = func() map[claimSets]lockStatement {
	m := map[claimSets]lockStatement{}
	for s := claimSets(0); s <= allSets; s++ {
		part := s.normalized() & nodeBound
		if _, ok := m[part]; !ok {
			m[part] = lockStatement{walk: mustNamed(lockNodesSQLFor(part)), every: mustNamed(lockEveryNodeSQLFor(part))}
		}
	}
	return m
}()

// nodeBound are the sets whose tasks a claim takes on nodes it locks.
const nodeBound = setNodes | setCoordinators | setGroups

// random is Rand, or math/rand/v2's Float64 when Rand is not set.
func (c *Catalog) random() float64 {
	if c.Rand != nil {
		return c.Rand()
	}
	return rand.Float64()
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
// It also says whether there are more than fewNodes nodes.
func (c *Catalog) claimStart(ctx context.Context, conn *pgx.Conn) (node, group string, many bool, err error) {
	s := &c.starts
	s.mu.Lock()
	nodes, groups, read := s.nodes, s.groups, s.read
	s.mu.Unlock()
	// Read outside the lock: a slow read delays only its own claim.
	if read.IsZero() || time.Since(read) > claimStartsMaxAge {
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(name ORDER BY name), '{}'), coalesce(array_agg(DISTINCT node_group ORDER BY node_group), '{}')
			FROM deckhand.node`).Scan(&nodes, &groups); err != nil {
			return "", "", false, err
		}
		s.mu.Lock()
		s.nodes, s.groups, s.read = nodes, groups, time.Now()
		s.mu.Unlock()
	}
	random := c.random
	pick := func(names []string) string {
		if len(names) == 0 {
			return ""
		}
		return names[min(len(names)-1, int(random()*float64(len(names))))]
	}
	return pick(nodes), pick(groups), len(nodes) > fewNodes, nil
}
