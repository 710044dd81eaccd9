package catalog

import "fmt"

// completeStmt records results of tasks that may have dependents; completeAloneStmt those of
// tasks that had none when they were claimed (Result.HasDependents false for every result).
var (
	completeStmt      = mustNamed(completeSQL)
	completeAloneStmt = mustNamed(completeAloneSQL)
)

// completeSQL records a batch of results, releasing and unscheduling their dependents.
var completeSQL = fmt.Sprintf(completeHead+completeDependents+completeDelta+completeTail,
	"", completeFollowedDelta, completeFollowedWoken, "false", "")

// completeAloneSQL is completeSQL without the parts that release and unschedule dependents, which
// PostgreSQL would set up on every run though they find nothing (docs/architecture.md, What a
// worker costs the catalog). A task may gain dependents after its claim (tasks added to a
// running job): when one of the tasks, as locked, has any, it records nothing and says so
// (deferred), and the caller records the batch with completeSQL.
var completeAloneSQL = fmt.Sprintf(completeHead+completeDelta+completeTail,
	"WHERE "+completeAloneOK, "", "", "NOT "+completeAloneOK, " AND "+completeAloneOK)

// completeAloneOK says that none of the results' tasks, as locked, has dependents.
const completeAloneOK = `(SELECT NOT coalesce(bool_or(l.has_dependents), false) FROM locked l)`

const completeFollowedDelta = `		UNION ALL
		SELECT job_id, 0, 0, 0, (state = 'unscheduled')::int, 0, false FROM followed
`

const completeFollowedWoken = `SELECT bound FROM followed WHERE state = 'runnable' UNION ALL `

// completeHead locks the results' tasks and moves them on; its verb is completeAloneSQL's guard
// of the tasks moved.
const completeHead = `
WITH RECURSIVE held AS MATERIALIZED (
	-- The results' tasks and those they hand their slots to, locked together in id order, as
	-- every writer of tasks locks them (a cancel of a job whose task one hands its slot to
	-- would otherwise deadlock with this statement). The statements below that lock or write
	-- these rows read this first (an init plan), and lock them again, as they are now.
	SELECT count(*) AS n FROM (SELECT FROM deckhand.task t
		WHERE cardinality(@handed_ids::bigint[]) > 0 AND t.id = ANY (@ids::bigint[] || @handed_ids::bigint[])
		ORDER BY t.id FOR UPDATE OF t) l
), locked AS MATERIALIZED (
	SELECT i.*, t.state AS old_state, t.attempts < t.max_attempts AS can_retry, t.has_dependents
	FROM unnest(@ids::bigint[], @tokens::bigint[], @workers::bigint[], @outcomes::text[], @backoffs::interval[], @errors::jsonb[], @finished_at::timestamptz[])
		AS i(id, token, worker_id, outcome, backoff, err, finished_at)
	JOIN deckhand.task t ON t.id = i.id AND t.attempt_token = i.token
	-- Probing the primary key, not the partial index of active tasks (isActive), which also
	-- carries dead entries until vacuum.
	WHERE t.state` + isActive + `
		AND (SELECT n FROM held) IS NOT NULL
	ORDER BY t.id FOR UPDATE OF t
), decided AS MATERIALIZED (
	SELECT l.id, l.token, l.worker_id, l.outcome, l.old_state,
		-- Errors are shown to users: secrets a message quotes (a conninfo) are hidden.
		(SELECT jsonb_object_agg(k, deckhand.redact(v)) FROM jsonb_each_text(l.err) AS e(k, v)) AS err,
		coalesce(l.finished_at, @now, clock_timestamp()) AS finished_at,
		coalesce(l.finished_at, @now, clock_timestamp()) + l.backoff AS not_before,
		CASE WHEN l.outcome = 'done' THEN 'done'
		     WHEN l.old_state = 'cancelling' OR l.outcome = 'cancelled' THEN 'cancelled'
		     WHEN l.outcome = 'released' THEN 'runnable'
		     WHEN l.outcome IN ('retry', 'lost') AND l.can_retry THEN 'runnable'
		     ELSE 'failed' END AS new_state
	FROM locked l
	%[1]s
), moved AS (
	-- A task of a paused job that would be runnable again is paused instead (t is the row as
	-- locked: a pause that committed meanwhile is seen).
	UPDATE deckhand.task t SET
		state = CASE WHEN d.new_state = 'runnable' AND t.pause IS NOT NULL THEN 'paused' ELSE d.new_state END,
		attempts = CASE WHEN d.outcome = 'released' AND d.new_state = 'runnable' THEN t.attempts - 1 ELSE t.attempts END,
		not_before = CASE WHEN d.new_state = 'runnable' THEN d.not_before ELSE t.not_before END,
		finished_at = CASE WHEN d.new_state = 'runnable' THEN NULL ELSE d.finished_at END,
		last_error = CASE WHEN d.new_state = 'done' THEN NULL ELSE coalesce(d.err, t.last_error) END,
		worker_id = NULL, queued = false,
		-- a group task back in the queue may run on another member next time
		node = CASE WHEN t.node_group IS NOT NULL AND d.new_state = 'runnable' THEN NULL ELSE t.node END
	FROM decided d WHERE t.id = d.id
	RETURNING t.id, t.job_id, t.runs, t.started_at, t.not_before, d.token, d.worker_id, d.outcome, d.new_state, d.err, d.finished_at,
		t.state, t.pause, t.node IS NOT NULL OR t.node_group IS NOT NULL AS bound
), recorded AS (
	INSERT INTO deckhand.task_attempt (task_id, token, attempt, worker_id, outcome, started_at, finished_at,
		sqlstate, message, detail, hint)
	SELECT m.id, m.token, m.runs, m.worker_id,
		CASE WHEN m.new_state = 'cancelled' THEN 'cancelled'
		     WHEN m.new_state = 'failed' AND m.outcome = 'retry' THEN 'failed'
		     ELSE m.outcome END,
		m.started_at, m.finished_at, m.err ->> 'sqlstate', m.err ->> 'message', m.err ->> 'detail', m.err ->> 'hint'
	FROM moved m
`

// completeDependents releases the dependents of finished tasks and unschedules, transitively,
// those of failed ones.
const completeDependents = `), downstream(id) AS (
	SELECT d.task_id FROM deckhand.task_dep d JOIN moved m ON m.id = d.depends_on WHERE m.new_state = 'failed'
	UNION
	SELECT d.task_id FROM deckhand.task_dep d JOIN downstream s ON d.depends_on = s.id
), released AS (
	SELECT d.task_id AS id, count(*) AS n
	FROM deckhand.task_dep d JOIN moved m ON m.id = d.depends_on
	WHERE m.new_state = 'done'
	GROUP BY d.task_id
), affected AS MATERIALIZED (
	-- One row per dependent: how many of its prerequisites finished, and whether one failed.
	-- Through unnest of arrays, so that the join below is planned for a handful of rows and
	-- probes the primary key even when a task releases 100,000 dependents (a fan-out); a CTE
	-- of its own, because FOR UPDATE copies each joined row whole into every row it locks.
	SELECT a.id, a.n, a.doomed
	FROM (SELECT array_agg(id) AS ids, array_agg(n) AS ns, array_agg(doomed) AS dooms
	      FROM (SELECT id, sum(n)::int AS n, bool_or(doomed) AS doomed
	            FROM (SELECT id, n, false AS doomed FROM released UNION ALL SELECT id, 0, true FROM downstream) x
	            GROUP BY id) y) arr,
	     unnest(arr.ids, arr.ns, arr.dooms) AS a(id, n, doomed)
), dependents AS (
	SELECT t.id, a.doomed, a.n
	FROM affected a JOIN deckhand.task t ON t.id = a.id
	WHERE t.state = 'blocked'
	ORDER BY t.id FOR UPDATE OF t
), followed AS (
	UPDATE deckhand.task t SET
		state = CASE WHEN d.doomed THEN 'unscheduled' WHEN t.pending_deps - d.n > 0 THEN 'blocked'
			WHEN t.pause IS NOT NULL THEN 'paused' ELSE 'runnable' END,
		pending_deps = CASE WHEN d.doomed THEN t.pending_deps ELSE t.pending_deps - d.n END,
		finished_at = CASE WHEN d.doomed THEN coalesce(@now, now()) END
	FROM dependents d WHERE t.id = d.id
	RETURNING t.id, t.job_id, t.state, t.node IS NOT NULL OR t.node_group IS NOT NULL AS bound
`

// completeDelta counts what moved by job; its verb is where the dependents' count goes.
const completeDelta = `), delta AS (
	-- A job takes the slow path, through its own row, when its counters other than done change
	-- or it is being paused (its tasks carry the pause, as locked above): those are rare. The
	-- fast path adds done counts to the completer's tally (0013_job_tally.sql).
	SELECT job_id, sum(done)::int AS done, sum(failed)::int AS failed, sum(cancelled)::int AS cancelled,
		sum(unscheduled)::int AS unscheduled, sum(stopped)::int AS stopped,
		bool_or(failed + cancelled + unscheduled > 0 OR paused) AS slow
	FROM (
		SELECT job_id, (new_state = 'done')::int AS done, (new_state = 'failed')::int AS failed,
			(new_state = 'cancelled')::int AS cancelled, 0 AS unscheduled, 1 AS stopped, pause IS NOT NULL AS paused
		FROM moved
%[2]s	) x GROUP BY job_id
), counted AS (
	-- A pausing job counts down the tasks it waits for (every moved task has stopped running).
	UPDATE deckhand.job j SET tasks_done = j.tasks_done + d.done, tasks_failed = j.tasks_failed + d.failed,
		tasks_cancelled = j.tasks_cancelled + d.cancelled, tasks_unscheduled = j.tasks_unscheduled + d.unscheduled,
		pause_waits_for = greatest(j.pause_waits_for - d.stopped, 0)
	FROM delta d WHERE j.id = d.job_id AND d.slow
	RETURNING j.id
), tallied AS (
	INSERT INTO deckhand.job_tally AS y (job_id, completer, done)
	SELECT job_id, @completer::bigint, done FROM delta WHERE NOT slow AND done > 0 ORDER BY job_id
	ON CONFLICT (job_id, completer) DO UPDATE SET done = y.done + excluded.done
	RETURNING y.job_id
`

// completeTail hands slots over and answers; its verbs are the dependents woken, whether the
// batch was deferred and completeAloneSQL's guard of the slots handed over.
const completeTail = `), handed AS (
	-- Tasks claimed ahead that their worker started in the slots of tasks these results ended:
	-- the slots pass to them in this transaction, so the node's count of slots in use stays
	-- what runs there. None has its own result in this batch (completeArgs).
	UPDATE deckhand.task q SET queued = false
	FROM unnest(@handed_ids::bigint[], @handed_tokens::bigint[]) AS h(id, token)
	WHERE (SELECT n FROM held) IS NOT NULL%[5]s AND q.id = h.id AND q.attempt_token = h.token AND q.queued
		AND q.state` + isActive + `
	RETURNING q.id
), woken AS (
	SELECT count(*) FILTER (WHERE NOT bound) AS anywhere, count(*) FILTER (WHERE bound) AS bound
	FROM (%[3]sSELECT bound FROM moved WHERE state = 'runnable') r
)
-- Other workers are woken for tasks bound to a node or group (a claim in this transaction may
-- have passed their node, locked by another claimer that cannot see them yet), and for tasks
-- that run anywhere unless this transaction claims too (notify_anywhere false): its claim sees
-- them, holds their rows, and takes them unless it fills its slots, when the caller wakes the
-- others (CompleteAndClaim).
SELECT (SELECT count(*) FROM moved)::int, (w.anywhere + w.bound)::int, w.anywhere::int, %[4]s AS deferred
FROM woken w, LATERAL (SELECT CASE WHEN w.bound > 0 OR (w.anywhere > 0 AND @notify_anywhere::bool)
	THEN pg_notify('deckhand_runnable', @released_by::text) END) notify,
	LATERAL (SELECT count(*) FROM counted) c, LATERAL (SELECT count(*) FROM tallied) t, LATERAL (SELECT count(*) FROM handed) h`
