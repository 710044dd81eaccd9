package catalog

import (
	"fmt"
	"strings"
)

// claimSQL runs with a snapshot taken after the node (and global) locks were granted, so its
// counts of running tasks include every earlier claimer's. Tasks that name a node take that
// node's free slots first; tasks that target a node group are then dealt round-robin over the
// remaining slots of the group's members that have replayed past the task's min_lsn (a primary
// always has), so parts of one export spread over the group. It takes from every set of
// runnable tasks; claimStatement(s) is the same statement reduced to the sets s (claim_sets.go).
var claimSQL = claimSQLFor(allSets)

// claimSQLFor is the claim statement that takes from the sets s alone (normalized: groups come
// with both sets of node-bound tasks, whose parts dealing to groups reads). PostgreSQL sets up
// every part of a statement on every run, used or not, and a part costs that however little it
// finds: a claim with only the parts of the sets that have runnable work costs the catalog less
// (docs/architecture.md). Every variant has the same columns, arguments aside (@spread only
// with tasks that run anywhere, @ahead_nodes and @ahead_counts only with node-bound ones).
func claimSQLFor(s claimSets) string {
	var q strings.Builder
	q.WriteString(fmt.Sprintf(claimInputs, allSets&^s))
	if s&(setNodes|setCoordinators) != 0 {
		q.WriteString(claimCap)
	}
	q.WriteString(claimBudget)
	var onNodes, picked []string
	if s&setAnywhere != 0 {
		q.WriteString(claimAnywhere)
		picked = append(picked, `SELECT id, NULL::text AS node, 0::bigint AS rank, claim_key, false AS queued FROM anywhere`)
	}
	if s&setNodes != 0 {
		q.WriteString(claimNodeTasks)
		onNodes = append(onNodes, `SELECT id, node, false AS coordinator, rank, claim_key, queued FROM node_tasks`)
	}
	if s&setCoordinators != 0 {
		q.WriteString(claimNodeCoordinators)
		onNodes = append(onNodes, `SELECT id, node, true AS coordinator, rank, claim_key, false AS queued FROM node_coordinators`)
	}
	if len(onNodes) > 0 {
		q.WriteString("), on_nodes AS (\n\t" + strings.Join(onNodes, "\n\tUNION ALL ") + "\n")
		picked = append(picked, `SELECT id, NULL::text AS node, rank, claim_key, queued FROM on_nodes`)
	}
	if s&setGroups != 0 {
		q.WriteString(claimGroups)
		picked = append(picked, `SELECT id, node, 0::bigint AS rank, claim_key, false AS queued FROM in_groups`)
	}
	if len(picked) == 0 {
		panic("catalog: a claim statement takes from no set")
	}
	q.WriteString(fmt.Sprintf(claimPick, strings.Join(picked, "\n\t\tUNION ALL ")))
	q.WriteString(claimTail)
	return q.String()
}

// claimInputs reads what the statement that locked the nodes (lockedTail) left in the
// transaction's settings: the nodes, their caps, the global cap, and the sets that had
// runnable tasks when it ran. A statement reduced to some sets claims nothing when another set
// had work: the caller claims again with one that takes from it (Catalog.claim), so that a
// reduced statement never passes tasks of a higher priority in a set it leaves out. Its
// argument is the sets the statement leaves out.
const claimInputs = `
WITH inputs AS (
	SELECT CASE WHEN s.ok THEN s.nodes ELSE '{}' END AS nodes, CASE WHEN s.ok THEN s.caps ELSE '{}' END AS caps, s.global, s.ok
	FROM (SELECT coalesce(nullif(pg_catalog.current_setting('deckhand.claim_nodes', true), ''), '{}')::text[] AS nodes,
		coalesce(nullif(pg_catalog.current_setting('deckhand.claim_caps', true), ''), '{}')::int[] AS caps,
		coalesce(nullif(pg_catalog.current_setting('deckhand.claim_global', true), ''), '0')::int AS global,
		(coalesce(nullif(pg_catalog.current_setting('deckhand.claim_sets', true), ''), '0')::int & %d) = 0 AS ok) s
`

const claimCap = `), cap AS (
	-- An export's coordinator only holds a lock while its parts work: it takes no slot, or its
	-- parts could never run. Coordinators have slots of their own, as many as the node's, so
	-- that exports cannot make the node hold a session each.
	-- Counting stops just past the cap: what runs beyond it changes nothing, but a node past
	-- its cap (lowered while the node was busy) gets no tasks ahead, so that its slots, which
	-- tasks claimed ahead would keep passing on, empty down to the new cap.
	SELECT c.node, c.rank, greatest(c.cap - h.n, 0) AS free,
		c.cap - (SELECT count(*) FROM (SELECT FROM deckhand.task t
		WHERE t.node = c.node AND t.state IN ('running', 'cancelling') AND NOT t.queued AND t.kind = 'export' ORDER BY t.id LIMIT c.cap) r) AS coordinators,
		-- What the worker asks for beyond the free slots, to start in its own slots there as its
		-- tasks end (Ahead): taken after the free slots' tasks, and holding none of the node's.
		CASE WHEN h.n > c.cap THEN 0
		     ELSE coalesce((SELECT a.n FROM unnest(@ahead_nodes::text[], @ahead_counts::int[]) AS a(node, n) WHERE a.node = c.node LIMIT 1), 0)
		END AS ahead
	FROM inputs, unnest(inputs.nodes, inputs.caps) WITH ORDINALITY AS c(node, cap, rank)
	CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT FROM deckhand.task t
		WHERE t.node = c.node AND t.state IN ('running', 'cancelling') AND NOT t.queued AND t.kind <> 'export' ORDER BY t.id LIMIT c.cap + 1) r) h
`

const claimBudget = `), budget AS (
	SELECT CASE WHEN NOT inputs.ok THEN 0
		WHEN inputs.global > 0
		THEN least(@limit::int, inputs.global - (SELECT count(*) FROM (SELECT FROM deckhand.task t
			WHERE t.state IN ('running', 'cancelling') ORDER BY t.worker_id LIMIT inputs.global) r))
		ELSE @limit::int END AS n
	FROM inputs
`

var claimAnywhere = `), anywhere_head AS (
	-- The earliest claim_key among tasks that run anywhere, and where in its tasks (one job's,
	-- mostly) this claim starts: a random fraction (the spread argument) of the way from its
	-- first id to its last, so that concurrent claimers take different tasks of a large job
	-- rather than all start at its first, pass each other's locked rows and lock rows that
	-- others took after their snapshot. Priorities hold: tasks of a later claim_key come only
	-- after all of these.
	SELECT h.claim_key, h.id + floor(@spread::float8 * (l.id - h.id + 1))::bigint AS pivot
	FROM (SELECT t.claim_key, t.id FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node IS NULL AND t.node_group IS NULL AND t.not_before <= coalesce(@now, now())
		ORDER BY t.claim_key, t.id LIMIT 1) h
	CROSS JOIN LATERAL (SELECT t.id FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node IS NULL AND t.node_group IS NULL AND t.claim_key = h.claim_key
		ORDER BY t.claim_key DESC, t.id DESC LIMIT 1) l
), anywhere AS (
	-- From the pivot to the last of the earliest claim_key's tasks, then from its first to the
	-- pivot, then the later claim_keys': each part is read only if the ones before fall short.
	SELECT a.id, a.claim_key FROM anywhere_head h CROSS JOIN LATERAL (
		` + anywherePart(`t.claim_key = h.claim_key AND t.id >= h.pivot`) + `
		UNION ALL ` + anywherePart(`t.claim_key = h.claim_key AND t.id < h.pivot`) + `
		UNION ALL ` + anywherePart(`t.claim_key > h.claim_key`) + `
		LIMIT (SELECT n FROM budget)) a
`

// anywherePart is one part of claimAnywhere's anywhere CTE: the runnable tasks that run
// anywhere and meet cond, in claim order, locked (SKIP LOCKED), at most the claim's budget. A
// subquery of its own, since PostgreSQL refuses FOR UPDATE in a branch of a UNION.
func anywherePart(cond string) string {
	return `(SELECT * FROM (SELECT t.id, t.claim_key FROM deckhand.task t
		 WHERE t.state = 'runnable' AND t.node IS NULL AND t.node_group IS NULL AND t.not_before <= coalesce(@now, now())
		   AND ` + cond + `
		 ORDER BY t.claim_key, t.id LIMIT (SELECT n FROM budget) FOR UPDATE OF t SKIP LOCKED) p)`
}

const claimNodeTasks = `), node_tasks AS (
	-- The node's first tasks take its free slots; those after them, up to what the worker
	-- asked for ahead, are queued in the worker.
	SELECT p.id, cap.node, cap.rank, p.claim_key, p.rn > cap.free AS queued FROM cap CROSS JOIN LATERAL (
		SELECT l.id, l.claim_key, row_number() OVER (ORDER BY l.claim_key, l.id) AS rn FROM (
			SELECT t.id, t.claim_key FROM deckhand.task t
			WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = cap.node AND t.not_before <= coalesce(@now, now())
			  AND t.kind <> 'export'
			ORDER BY t.claim_key, t.id LIMIT cap.free + cap.ahead FOR UPDATE SKIP LOCKED) l) p
`

const claimNodeCoordinators = `), node_coordinators AS (
	SELECT p.id, cap.node, cap.rank, p.claim_key FROM cap CROSS JOIN LATERAL (
		SELECT t.id, t.claim_key FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = cap.node AND t.not_before <= coalesce(@now, now())
		  AND t.kind = 'export'
		ORDER BY t.claim_key, t.id LIMIT cap.coordinators FOR UPDATE SKIP LOCKED) p
`

const claimGroups = `), group_tasks AS (
	-- Each group's first tasks, as many as the claim may take.
	SELECT t.id, g.node_group, t.min_lsn, row_number() OVER (PARTITION BY g.node_group ORDER BY t.claim_key, t.id) AS rn
	FROM (SELECT DISTINCT n.node_group FROM inputs, deckhand.node n WHERE n.name = ANY (inputs.nodes)) g
	CROSS JOIN LATERAL (
		SELECT t.id, t.min_lsn, t.claim_key FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group = g.node_group AND t.not_before <= coalesce(@now, now())
		ORDER BY t.claim_key, t.id LIMIT (SELECT n FROM budget)) t
), group_slots AS (
	-- Each member's free slots, as many as its group has tasks to deal (none, mostly).
	SELECT n.name AS node, n.node_group, row_number() OVER (PARTITION BY n.node_group ORDER BY s, n.name) AS rn
	FROM cap JOIN deckhand.node n ON n.name = cap.node
	CROSS JOIN LATERAL (SELECT count(*) AS tasks, max(g.min_lsn) AS min_lsn FROM group_tasks g WHERE g.node_group = n.node_group) g
	CROSS JOIN LATERAL generate_series(1, least(g.tasks,
		cap.free - (SELECT count(*) FROM on_nodes o WHERE o.node = cap.node AND NOT o.coordinator AND NOT o.queued))) s
	-- A member whose latest probe failed gets none: after a failover the old primary, down,
	-- keeps the role it last had, and every task dealt to it would fail to connect.
	WHERE n.last_error IS NULL AND (n.role = 'primary' OR n.replay_lsn >= g.min_lsn)
), dealt AS MATERIALIZED (
	-- Through unnest, like picks below: primary key probes whatever the estimates.
	SELECT d.id, d.node
	FROM (SELECT array_agg(g.id) AS ids, array_agg(s.node) AS nodes
	      FROM group_tasks g JOIN group_slots s ON s.node_group = g.node_group AND s.rn = g.rn) a,
	     unnest(a.ids, a.nodes) AS d(id, node)
), in_groups AS (
	-- Read as runnable in the statement's snapshot; locked, they are checked again in the state
	-- a transaction that committed since (another claim, a cancel, a pause) left them in.
	SELECT t.id, d.node, t.claim_key FROM dealt d JOIN deckhand.task t ON t.id = d.id
	WHERE t.state = 'runnable'
	FOR UPDATE OF t SKIP LOCKED
`

// claimPick takes the candidates of every set in one order, claim_key first, so that
// priorities hold across the sets: a task that runs anywhere does not pass a node's task of a
// higher priority, nor one that has waited longer. Among tasks of equal claim_key (one job's),
// nodes take turns from the claim's random start (their rank in the locked nodes), so that a
// claim that cannot take every node's share does not always serve the same nodes. Tasks
// claimed ahead come last: they are only to hand a slot on to.
const claimPick = `), picked AS (
	SELECT id, node, queued FROM (
		%s) c
	ORDER BY queued, claim_key, rank, id
`

// claimTail takes the picked tasks. It reaches them through unnest of an array, which the
// planner takes for a handful of rows whatever it believes about the table, so that it always
// probes the primary key (never a hash join over the whole table); the rows it returns are
// joined to their job and node the same way. The unnested rows are a CTE of their own: rows
// joined to an UPDATE or FOR UPDATE are copied whole into each row it locks, arrays included.
const claimTail = `	LIMIT (SELECT n FROM budget)
), picks AS MATERIALIZED (
	SELECT p.id, p.node, p.queued
	FROM (SELECT array_agg(id) AS ids, array_agg(node) AS nodes, array_agg(queued) AS queued FROM picked) a,
		unnest(a.ids, a.nodes, a.queued) AS p(id, node, queued)
), claimed AS (
	UPDATE deckhand.task t SET state = 'running', attempts = t.attempts + 1, runs = t.runs + 1,
		attempt_token = nextval('deckhand.attempt_token_seq'), worker_id = @worker,
		started_at = coalesce(@now, clock_timestamp()), finished_at = NULL,
		node = coalesce(p.node, t.node), queued = p.queued
	-- Checked again on the row as locked, the one guard every set of picks passes: a claim,
	-- cancel or pause that committed after this statement's snapshot has moved it on.
	FROM picks p WHERE t.id = p.id AND t.state = 'runnable'
	RETURNING t.*
), started AS (
	-- The first claim of a job marks it started; concurrent first claims of the same job pass
	-- its row (SKIP LOCKED) rather than queue for it, each behind the whole transaction of the
	-- one before (a row locked and found started already stays locked to the end). A claim
	-- that passes it for another holder (a pause, say) leaves the mark to the job's next claim.
	UPDATE deckhand.job j SET started_at = coalesce(@now, clock_timestamp())
	WHERE j.id = ANY (ARRAY(SELECT l.id FROM deckhand.job l
		WHERE l.id = ANY (ARRAY(SELECT DISTINCT job_id FROM claimed)) AND l.started_at IS NULL
		FOR NO KEY UPDATE OF l SKIP LOCKED))
)
SELECT c.id, c.job_id, c.name, c.kind, c.node, n.dsn AS node_dsn, c.owner, c.sql, c.payload,
	c.in_transaction, (extract(epoch FROM c.timeout) * 1000)::bigint AS timeout_ms, c.attempts,
	c.max_attempts, c.runs, c.attempt_token, c.started_at, j.search_path, j.settings, j.submitted_by,
	c.has_dependents, c.queued
FROM claimed c JOIN deckhand.job j ON j.id = c.job_id LEFT JOIN deckhand.node n ON n.name = c.node
-- In claim order: the worker gives the slots that come free to tasks claimed ahead in this order.
ORDER BY c.queued, c.claim_key, c.id`
