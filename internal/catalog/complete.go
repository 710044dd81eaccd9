package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Result is the end of one attempt, reported by the worker that ran it (or, for OutcomeLost,
// by the leader that rescued it).
type Result struct {
	TaskID   int64
	Token    int64
	WorkerID int64
	// JobID is the task's job, when the caller knows it (0 otherwise). Nothing is written
	// from it: a worker keeps the results of a job whose rows are held together (locks.go).
	JobID int64
	// Outcome is OutcomeDone, OutcomeRetry, OutcomeFailed, OutcomeCancelled, OutcomeReleased or
	// OutcomeLost. Retry and lost become failed when the task has no attempts left.
	Outcome deckhandtype.Outcome
	Backoff time.Duration // for retry: how long the task waits before it may run again
	Err     *deckhandtype.TaskError
	// FinishedAt is when the attempt ended; zero means now on the catalog's clock, which keeps
	// attempt durations and backoffs on one clock whatever the workers' clocks say.
	FinishedAt time.Time
	// HandedTo and HandedToken name the attempt of a task claimed ahead (Ahead) that the worker
	// started in this attempt's slot on its node: recording this result hands it the slot.
	// Zero: none.
	HandedTo, HandedToken int64
	// HasDependents is the task's ClaimedTask.HasDependents: whether other tasks waited on it
	// when it was claimed. A batch none of whose tasks had any is recorded by a statement
	// without the parts that release dependents (completeAloneSQL), which checks it again on the
	// rows as locked: a task that gained dependents since costs the batch a second statement.
	HasDependents bool
}

// Completion summarizes what Complete changed.
type Completion struct {
	Applied  int // results whose token still matched; the rest were fenced off
	Runnable int // tasks that became runnable (dependents released, retries, releases)
}

// Complete records a batch of attempt results in one statement: it moves each task (guarded
// by its attempt token), records the attempt, releases dependents of finished tasks,
// unschedules the dependents of failed ones transitively, and updates job counters (from
// which the job's state follows). Rows are locked in a fixed order — tasks by id, then the
// job — the order every writer in this package uses.
func (c *Catalog) Complete(ctx context.Context, results []Result) (Completion, error) {
	out, _, err := c.CompleteAndClaim(ctx, results, 0, 0)
	return out, err
}

// CompleteAndClaim records results like Complete and, when limit > 0, claims up to limit
// runnable tasks for workerID in the same transaction — so a dependent released by these
// results starts without waiting for a second commit. It costs two pipelined round trips.
// A result whose rows a catalog role holds locked fails the whole call with a lock timeout
// (IsLockTimeout) after rowLockWait: the caller records the results one by one then.
func (c *Catalog) CompleteAndClaim(ctx context.Context, results []Result, workerID int64, limit int) (Completion, []deckhandtype.ClaimedTask, error) {
	return c.CompleteAndClaimAhead(ctx, results, workerID, limit, nil)
}

// CompleteAndClaimAhead is CompleteAndClaim whose claim also takes tasks ahead (Ahead).
func (c *Catalog) CompleteAndClaimAhead(ctx context.Context, results []Result, workerID int64, limit int, ahead Ahead) (Completion, []deckhandtype.ClaimedTask, error) {
	if len(results) == 0 {
		return Completion{}, nil, nil
	}
	named, err := completeArgs(results)
	if err != nil {
		return Completion{}, nil, err
	}
	named["now"] = c.now()
	named["released_by"] = strconv.FormatInt(results[0].WorkerID, 10)
	named["completer"] = results[0].WorkerID
	named["notify_anywhere"] = limit <= 0
	stmt := completeAloneStmt
	for _, r := range results {
		if r.HasDependents {
			stmt = completeStmt
		}
	}
	args, err := stmt.args(named)
	if err != nil {
		return Completion{}, nil, err
	}
	for try := 0; ; try++ {
		var (
			out      Completion
			claimed  []deckhandtype.ClaimedTask
			err      error
			anywhere int
			deferred bool
		)
		scan := func(row pgx.Row) error { return row.Scan(&out.Applied, &out.Runnable, &anywhere, &deferred) }
		// Right after the commit, in the same round trip: the jobs these results may have
		// ended are settled if, in a snapshot taken then, all their tasks have ended.
		settle := func(b *pgx.Batch) { b.Queue(`SELECT deckhand.settle_ended($1::bigint[])`, named["ids"]) }
		if limit <= 0 {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue(probesOnly)
			b.Queue(boundLockWait)
			b.Queue(stmt.sql, args...).QueryRow(scan)
			b.Queue("COMMIT")
			settle(b)
			err = c.inTx(ctx, b)
		} else {
			claimed, err = c.inClaimTx(ctx, workerID, limit, ahead, func(b *pgx.Batch) {
				b.Queue(boundLockWait)
				b.Queue(stmt.sql, args...).QueryRow(scan)
			}, settle)
		}
		if err == nil && deferred {
			// A task gained dependents after its claim (or its result did not say it had some):
			// nothing of the batch was recorded, and what the claim took stands. The batch is
			// recorded by the statement that releases dependents, claiming into what is left of
			// the slots, so that a released dependent starts as it would have.
			all := slices.Clone(results)
			for i := range all {
				all[i].HasDependents = true
			}
			more := 0
			if limit > 0 {
				more = max(limit-len(claimed), 0)
			}
			out, again, err := c.CompleteAndClaimAhead(ctx, all, workerID, more, ahead)
			if err != nil {
				return Completion{}, nil, err
			}
			return out, append(claimed, again...), nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" && try < 5 {
			continue // two completers met on shared dependents or jobs in different orders
		}
		if err != nil {
			return Completion{}, nil, fmt.Errorf("complete %d tasks: %w", len(results), err)
		}
		if limit > 0 && anywhere > 0 && len(claimed) >= limit {
			// The claim filled its slots: what it left of the released tasks is for others.
			// Without the wake-up they would find it at their next poll; the results stand.
			c.Pool.Exec(ctx, `SELECT pg_catalog.pg_notify($1, $2)`, ChannelRunnable, named["released_by"]) //nolint:errcheck
		}
		return out, claimed, nil
	}
}

// SettleJobs folds the done tallies of the given jobs into their rows, or of every job that
// has some when ids is empty (the leader's round), deriving their states from the complete
// counts. Completions settle the jobs they ended with deckhand.settle_ended instead
// (0013_job_tally.sql); this is the backstop. Each job is settled in a
// transaction of its own, in id order: a settling never holds one job's row while it waits for
// another's (a completion writing the first job's tally could wait for it), and locking a row
// first and updating it after, in one statement, made concurrent settlings deadlock on the
// row's versions. A deadlock that remains possible (with a completion that moves the job on
// the slow path) is tried again, as a completion does.
func (c *Catalog) SettleJobs(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		if err := c.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT job_id), '{}') FROM deckhand.job_tally`).Scan(&ids); err != nil {
			return fmt.Errorf("settle jobs: %w", err)
		}
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		for try := 0; ; try++ {
			// A no-op update: the job's trigger folds the tallies and derives the state. A job
			// whose row is locked is settled at a later round: the lock may be held for as
			// long as a caller of deckhand.pause or cancel likes (locks.go), and this round
			// is the leader's, which renews its lease and rescues attempts in between.
			_, err := c.Pool.Exec(ctx, `UPDATE deckhand.job SET tasks_done = tasks_done
				WHERE id = (SELECT l.id FROM deckhand.job l WHERE l.id = $1 FOR UPDATE SKIP LOCKED)`, id)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" && try < 5 {
				continue
			}
			if err != nil {
				return fmt.Errorf("settle job %d: %w", id, err)
			}
			break
		}
	}
	return nil
}

// inTx sends b, a whole transaction, in one round trip on a connection of its own.
func (c *Catalog) inTx(ctx context.Context, b *pgx.Batch) error {
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		// Leave no transaction open on a pooled connection.
		if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
		}
		return err
	}
	return nil
}

// completeArgs spreads the results over one array per column, for completeSQL's unnest;
// the caller adds now and released_by.
func completeArgs(results []Result) (pgx.StrictNamedArgs, error) {
	n := len(results)
	ids := make([]int64, n)
	tokens := make([]int64, n)
	workers := make([]int64, n)
	outcomes := make([]deckhandtype.Outcome, n)
	backoffs := make([]time.Duration, n)
	errs := make([][]byte, n)
	finished := make([]*time.Time, n)
	handedIDs, handedTokens := []int64{}, []int64{}
	ended := make(map[int64]bool, n)
	for _, r := range results {
		ended[r.TaskID] = true
	}
	for i, r := range results {
		ids[i], tokens[i], workers[i], outcomes[i], backoffs[i] = r.TaskID, r.Token, r.WorkerID, r.Outcome, r.Backoff
		// A task handed a slot whose own result is in the batch has ended too, and keeps none.
		// Left out here, it is none of the statement's handed tasks, which it so updates once.
		if r.HandedTo != 0 && !ended[r.HandedTo] {
			handedIDs, handedTokens = append(handedIDs, r.HandedTo), append(handedTokens, r.HandedToken)
		}
		if !r.FinishedAt.IsZero() {
			finished[i] = &r.FinishedAt
		}
		if r.Err != nil {
			b, err := json.Marshal(clipped(r.Err))
			if err != nil {
				return nil, err
			}
			errs[i] = b
		}
	}
	return pgx.StrictNamedArgs{"ids": ids, "tokens": tokens, "workers": workers, "outcomes": outcomes,
		"backoffs": backoffs, "errors": errs, "finished_at": finished, "handed_ids": handedIDs, "handed_tokens": handedTokens}, nil
}

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
