package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ClaimedTask is a task a worker now owns for one attempt, identified by Token.
type ClaimedTask struct {
	ID            int64             `db:"id"`
	JobID         int64             `db:"job_id"`
	Name          string            `db:"name"`
	Kind          string            `db:"kind"`
	Node          *string           `db:"node"`
	NodeDSN       *string           `db:"node_dsn"`
	Owner         string            `db:"owner"`
	SQL           string            `db:"sql"`
	Payload       json.RawMessage   `db:"payload"`
	InTransaction bool              `db:"in_transaction"`
	TimeoutMS     int64             `db:"timeout_ms"`
	Attempts      int               `db:"attempts"` // charged attempts, this one included
	MaxAttempts   int               `db:"max_attempts"`
	Run           int               `db:"runs"` // 1-based run number of this attempt
	Token         int64             `db:"attempt_token"`
	StartedAt     time.Time         `db:"started_at"`
	SearchPath    string            `db:"search_path"`
	Settings      map[string]string `db:"settings"`
	SubmittedBy   string            `db:"submitted_by"`
	// HasDependents tells the worker that finishing this task may release others, so it is
	// worth claiming in the transaction that records the result.
	HasDependents bool `db:"has_dependents"`
}

// Claim takes up to limit runnable tasks for the worker, honouring every node's max_tasks
// and the global max_running_tasks setting. It runs as two statements in one transaction:
// the first locks the nodes that have work (SKIP LOCKED, so claimers of one node queue
// without blocking others); the second, with a fresh snapshot taken under those locks,
// counts what runs on them and claims within their free capacity. A single statement could
// not do this safely: its snapshot would predate the lock and miss a concurrent claim.
func (c *Catalog) Claim(ctx context.Context, workerID int64, limit int) ([]ClaimedTask, error) {
	if limit <= 0 {
		return nil, nil
	}
	claimed, err := c.inClaimTx(ctx, workerID, limit, nil)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return claimed, nil
}

// inClaimTx runs a claim transaction in two pipelined round trips: BEGIN, whatever first
// queues, and the node locks; then the claim itself with COMMIT.
func (c *Catalog) inClaimTx(ctx context.Context, workerID int64, limit int, first func(*pgx.Batch)) ([]ClaimedTask, error) {
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	claimed, err := c.claim(ctx, conn.Conn(), workerID, limit, first)
	if err != nil {
		// Leave no transaction open on a pooled connection.
		if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
		}
		return nil, err
	}
	return claimed, nil
}

func (c *Catalog) claim(ctx context.Context, conn *pgx.Conn, workerID int64, limit int, first func(*pgx.Batch)) ([]ClaimedTask, error) {
	var (
		nodes     []string
		caps      []int32
		global    int
		groupWork bool
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if first != nil {
		first(b)
	}
	b.Queue(lockNodesSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&nodes, &caps, &global, &groupWork) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if global > 0 {
		// A global cap needs one serialization point; only pay for it when it is set.
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_xact_lock(7306086)`); err != nil {
			return nil, err
		}
	}
	var claimed []ClaimedTask
	b = &pgx.Batch{}
	query := claimSQL
	if groupWork {
		query = claimGroupsSQL
	}
	b.Queue(query, limit, nodes, caps, c.now(), workerID, global).Query(func(rows pgx.Rows) error {
		var err error
		claimed, err = pgx.CollectRows(rows, pgx.RowToStructByName[ClaimedTask])
		return err
	})
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return claimed, nil
}

const lockNodesSQL = `
WITH locked AS (
	SELECT n.name, n.max_tasks FROM deckhand.node n
	WHERE EXISTS (SELECT 1 FROM deckhand.task t WHERE t.node = n.name AND t.state = 'runnable' AND t.node_group IS NULL)
	   OR EXISTS (SELECT 1 FROM deckhand.task t
	              WHERE t.node_group = n.node_group AND t.state = 'runnable' AND t.node_group IS NOT NULL AND t.node IS NULL)
	ORDER BY n.name FOR UPDATE OF n SKIP LOCKED
)
SELECT coalesce(array_agg(name), '{}'), coalesce(array_agg(max_tasks), '{}'),
	coalesce((SELECT value::int FROM deckhand.setting WHERE name = 'max_running_tasks'), 0),
	EXISTS (SELECT 1 FROM deckhand.task WHERE state = 'runnable' AND node_group IS NOT NULL AND node IS NULL)
FROM locked`

// claimSQL runs with a snapshot taken after the node (and global) locks were granted, so its
// counts of running tasks include every earlier claimer's. Tasks that name a node take that
// node's free slots first; tasks that target a node group are then dealt round-robin over the
// remaining slots of the group's members that have replayed past the task's min_lsn (a primary
// always has), so parts of one export spread over the group.
var (
	claimSQL       = claimQuery(false)
	claimGroupsSQL = claimQuery(true) // used only when group tasks exist: the dealing costs a window per claim
)

// claimQuery builds the claim statement, with or without the dealing of group tasks.
func claimQuery(groups bool) string {
	if !groups {
		return claimHead + claimPick + claimTail
	}
	return claimHead + claimGroups + claimPick + "\tUNION ALL SELECT id, node FROM in_groups\n" + claimTail
}

const claimHead = `
WITH cap AS (
	-- An export's coordinator only holds a lock while its parts work: it takes no slot, or its
	-- parts could never run. Coordinators have slots of their own, as many as the node's, so
	-- that exports cannot make the node hold a session each.
	SELECT c.node, greatest(c.cap - (SELECT count(*) FROM deckhand.task t
		WHERE t.node = c.node AND t.state IN ('running', 'cancelling') AND t.kind <> 'export'), 0) AS free,
		greatest(c.cap - (SELECT count(*) FROM deckhand.task t
		WHERE t.node = c.node AND t.state IN ('running', 'cancelling') AND t.kind = 'export'), 0) AS coordinators
	FROM unnest($2::text[], $3::int[]) AS c(node, cap)
), budget AS (
	SELECT CASE WHEN $6::int > 0
		THEN least($1, greatest($6 - (SELECT count(*) FROM deckhand.task WHERE state IN ('running', 'cancelling')), 0))
		ELSE $1 END AS n
), anywhere AS (
	SELECT id FROM deckhand.task
	WHERE state = 'runnable' AND node IS NULL AND node_group IS NULL AND not_before <= coalesce($4, now())
	ORDER BY id LIMIT (SELECT n FROM budget) FOR UPDATE SKIP LOCKED
), node_tasks AS (
	SELECT p.id, cap.node FROM cap CROSS JOIN LATERAL (
		SELECT t.id FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = cap.node AND t.not_before <= coalesce($4, now())
		  AND t.kind <> 'export'
		ORDER BY t.id LIMIT cap.free FOR UPDATE SKIP LOCKED) p
), node_coordinators AS (
	SELECT p.id, cap.node FROM cap CROSS JOIN LATERAL (
		SELECT t.id FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node = cap.node AND t.not_before <= coalesce($4, now())
		  AND t.kind = 'export'
		ORDER BY t.id LIMIT cap.coordinators FOR UPDATE SKIP LOCKED) p
), on_nodes AS (
	SELECT id, node, false AS coordinator FROM node_tasks
	UNION ALL SELECT id, node, true FROM node_coordinators
`

const claimGroups = `), group_tasks AS (
	SELECT t.id, t.node_group, t.min_lsn, row_number() OVER (PARTITION BY t.node_group ORDER BY t.id) AS rn
	FROM deckhand.task t
	WHERE t.state = 'runnable' AND t.node_group IS NOT NULL AND t.node IS NULL
	  AND t.node_group IN (SELECT n.node_group FROM deckhand.node n WHERE n.name = ANY ($2))
	  AND t.not_before <= coalesce($4, now())
), group_slots AS (
	SELECT n.name AS node, n.node_group, row_number() OVER (PARTITION BY n.node_group ORDER BY s, n.name) AS rn
	FROM cap JOIN deckhand.node n ON n.name = cap.node
	CROSS JOIN LATERAL generate_series(1, cap.free - (SELECT count(*) FROM on_nodes o WHERE o.node = cap.node AND NOT o.coordinator)) s
	WHERE n.role = 'primary'
	   OR n.replay_lsn >= (SELECT max(g.min_lsn) FROM group_tasks g WHERE g.node_group = n.node_group)
), in_groups AS (
	SELECT t.id, s.node
	FROM group_tasks g
	JOIN group_slots s ON s.node_group = g.node_group AND s.rn = g.rn
	JOIN deckhand.task t ON t.id = g.id
	FOR UPDATE OF t SKIP LOCKED
`

const claimPick = `), picked AS (
	SELECT id, NULL::text AS node FROM anywhere
	UNION ALL SELECT id, NULL FROM on_nodes
`

const claimTail = `	LIMIT (SELECT n FROM budget)
), claimed AS (
	UPDATE deckhand.task t SET state = 'running', attempts = t.attempts + 1, runs = t.runs + 1,
		attempt_token = nextval('deckhand.attempt_token_seq'), worker_id = $5,
		started_at = coalesce($4, clock_timestamp()), finished_at = NULL,
		node = coalesce(picked.node, t.node)
	FROM picked WHERE t.id = picked.id
	RETURNING t.*
), started AS (
	UPDATE deckhand.job j SET started_at = coalesce($4, clock_timestamp())
	WHERE j.id IN (SELECT DISTINCT job_id FROM claimed) AND j.started_at IS NULL
)
SELECT c.id, c.job_id, c.name, c.kind, c.node, n.dsn AS node_dsn, c.owner, c.sql, c.payload,
	c.in_transaction, (extract(epoch FROM c.timeout) * 1000)::bigint AS timeout_ms, c.attempts,
	c.max_attempts, c.runs, c.attempt_token, c.started_at, j.search_path, j.settings, j.submitted_by,
	EXISTS (SELECT 1 FROM deckhand.task_dep d WHERE d.depends_on = c.id) AS has_dependents
FROM claimed c JOIN deckhand.job j ON j.id = c.job_id LEFT JOIN deckhand.node n ON n.name = c.node
ORDER BY c.id`

// Timeout is how long the task may run.
func (t *ClaimedTask) Timeout() time.Duration { return time.Duration(t.TimeoutMS) * time.Millisecond }

// Result is the end of one attempt, reported by the worker that ran it (or, for OutcomeLost,
// by the leader that rescued it).
type Result struct {
	TaskID   int64
	Token    int64
	WorkerID int64
	// Outcome is OutcomeDone, OutcomeRetry, OutcomeFailed, OutcomeCancelled, OutcomeReleased or
	// OutcomeLost. Retry and lost become failed when the task has no attempts left.
	Outcome string
	Backoff time.Duration // for retry: how long the task waits before it may run again
	Err     *TaskError
	// FinishedAt is when the attempt ended; zero means now on the catalog's clock, which keeps
	// attempt durations and backoffs on one clock whatever the workers' clocks say.
	FinishedAt time.Time
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
func (c *Catalog) CompleteAndClaim(ctx context.Context, results []Result, workerID int64, limit int) (Completion, []ClaimedTask, error) {
	if len(results) == 0 {
		return Completion{}, nil, nil
	}
	args, err := completeArgs(results)
	if err != nil {
		return Completion{}, nil, err
	}
	args = append(args, c.now(), strconv.FormatInt(results[0].WorkerID, 10))
	for try := 0; ; try++ {
		var (
			out     Completion
			claimed []ClaimedTask
			err     error
		)
		if limit <= 0 {
			err = c.Pool.QueryRow(ctx, completeSQL, args...).Scan(&out.Applied, &out.Runnable)
		} else {
			claimed, err = c.inClaimTx(ctx, workerID, limit, func(b *pgx.Batch) {
				b.Queue(completeSQL, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&out.Applied, &out.Runnable) })
			})
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" && try < 5 {
			continue // two completers met on shared dependents or jobs in different orders
		}
		if err != nil {
			return Completion{}, nil, fmt.Errorf("complete %d tasks: %w", len(results), err)
		}
		return out, claimed, nil
	}
}

func completeArgs(results []Result) ([]any, error) {
	n := len(results)
	ids := make([]int64, n)
	tokens := make([]int64, n)
	workers := make([]int64, n)
	outcomes := make([]string, n)
	backoffs := make([]time.Duration, n)
	errs := make([][]byte, n)
	finished := make([]*time.Time, n)
	for i, r := range results {
		ids[i], tokens[i], workers[i], outcomes[i], backoffs[i] = r.TaskID, r.Token, r.WorkerID, r.Outcome, r.Backoff
		if !r.FinishedAt.IsZero() {
			finished[i] = &r.FinishedAt
		}
		if r.Err != nil {
			b, err := json.Marshal(r.Err.clipped())
			if err != nil {
				return nil, err
			}
			errs[i] = b
		}
	}
	return []any{ids, tokens, workers, outcomes, backoffs, errs, finished}, nil
}

const completeSQL = `
WITH RECURSIVE locked AS MATERIALIZED (
	SELECT i.*, t.state AS old_state, t.attempts < t.max_attempts AS can_retry
	FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::interval[], $6::jsonb[], $7::timestamptz[])
		AS i(id, token, worker_id, outcome, backoff, err, finished_at)
	JOIN deckhand.task t ON t.id = i.id AND t.attempt_token = i.token
	-- Written as a negation so the planner probes the primary key instead of scanning the
	-- partial index of active tasks, which carries dead entries until vacuum.
	WHERE t.state <> ALL ('{blocked,runnable,done,failed,unscheduled,cancelled}')
	ORDER BY t.id FOR UPDATE OF t
), decided AS MATERIALIZED (
	SELECT l.id, l.token, l.worker_id, l.outcome, l.old_state,
		-- Errors are shown to users: secrets a message quotes (a conninfo) are hidden.
		(SELECT jsonb_object_agg(k, deckhand.redact(v)) FROM jsonb_each_text(l.err) AS e(k, v)) AS err,
		coalesce(l.finished_at, $8, clock_timestamp()) AS finished_at,
		coalesce(l.finished_at, $8, clock_timestamp()) + l.backoff AS not_before,
		CASE WHEN l.outcome = 'done' THEN 'done'
		     WHEN l.old_state = 'cancelling' OR l.outcome = 'cancelled' THEN 'cancelled'
		     WHEN l.outcome = 'released' THEN 'runnable'
		     WHEN l.outcome IN ('retry', 'lost') AND l.can_retry THEN 'runnable'
		     ELSE 'failed' END AS new_state
	FROM locked l
), moved AS (
	UPDATE deckhand.task t SET
		state = d.new_state,
		attempts = CASE WHEN d.outcome = 'released' AND d.new_state = 'runnable' THEN t.attempts - 1 ELSE t.attempts END,
		not_before = CASE WHEN d.new_state = 'runnable' THEN d.not_before ELSE t.not_before END,
		finished_at = CASE WHEN d.new_state = 'runnable' THEN NULL ELSE d.finished_at END,
		last_error = CASE WHEN d.new_state = 'done' THEN NULL ELSE coalesce(d.err, t.last_error) END,
		worker_id = NULL,
		-- a group task back in the queue may run on another member next time
		node = CASE WHEN t.node_group IS NOT NULL AND d.new_state = 'runnable' THEN NULL ELSE t.node END
	FROM decided d WHERE t.id = d.id
	RETURNING t.id, t.job_id, t.runs, t.started_at, t.not_before, d.token, d.worker_id, d.outcome, d.new_state, d.err, d.finished_at
), recorded AS (
	INSERT INTO deckhand.task_attempt (task_id, token, attempt, worker_id, outcome, started_at, finished_at,
		sqlstate, message, detail, hint)
	SELECT m.id, m.token, m.runs, m.worker_id,
		CASE WHEN m.new_state = 'cancelled' THEN 'cancelled'
		     WHEN m.new_state = 'failed' AND m.outcome = 'retry' THEN 'failed'
		     ELSE m.outcome END,
		m.started_at, m.finished_at, m.err ->> 'sqlstate', m.err ->> 'message', m.err ->> 'detail', m.err ->> 'hint'
	FROM moved m
), downstream(id) AS (
	SELECT d.task_id FROM deckhand.task_dep d JOIN moved m ON m.id = d.depends_on WHERE m.new_state = 'failed'
	UNION
	SELECT d.task_id FROM deckhand.task_dep d JOIN downstream s ON d.depends_on = s.id
), released AS (
	SELECT d.task_id AS id, count(*) AS n
	FROM deckhand.task_dep d JOIN moved m ON m.id = d.depends_on
	WHERE m.new_state = 'done'
	GROUP BY d.task_id
), dependents AS (
	-- = ANY keeps this an index lookup: the planner cannot tell how few ids there are.
	SELECT t.id, t.id IN (SELECT id FROM downstream) AS doomed, coalesce(r.n, 0) AS n
	FROM deckhand.task t
	LEFT JOIN released r ON r.id = t.id
	WHERE t.id = ANY (ARRAY(SELECT id FROM downstream UNION SELECT id FROM released)) AND t.state = 'blocked'
	ORDER BY t.id FOR UPDATE OF t
), followed AS (
	UPDATE deckhand.task t SET
		state = CASE WHEN d.doomed THEN 'unscheduled' WHEN t.pending_deps - d.n <= 0 THEN 'runnable' ELSE 'blocked' END,
		pending_deps = CASE WHEN d.doomed THEN t.pending_deps ELSE t.pending_deps - d.n END,
		finished_at = CASE WHEN d.doomed THEN coalesce($8, now()) END
	FROM dependents d WHERE t.id = d.id
	RETURNING t.id, t.job_id, t.state
), delta AS (
	SELECT job_id, sum(done)::int AS done, sum(failed)::int AS failed, sum(cancelled)::int AS cancelled,
		sum(unscheduled)::int AS unscheduled
	FROM (
		SELECT job_id, (new_state = 'done')::int AS done, (new_state = 'failed')::int AS failed,
			(new_state = 'cancelled')::int AS cancelled, 0 AS unscheduled
		FROM moved
		UNION ALL
		SELECT job_id, 0, 0, 0, (state = 'unscheduled')::int FROM followed
	) x GROUP BY job_id
), counted AS (
	UPDATE deckhand.job j SET tasks_done = j.tasks_done + d.done, tasks_failed = j.tasks_failed + d.failed,
		tasks_cancelled = j.tasks_cancelled + d.cancelled, tasks_unscheduled = j.tasks_unscheduled + d.unscheduled
	FROM delta d WHERE j.id = d.job_id AND (d.done + d.failed + d.cancelled + d.unscheduled) > 0
	RETURNING j.id
), woken AS (
	SELECT (SELECT count(*) FROM followed WHERE state = 'runnable')
	     + (SELECT count(*) FROM moved WHERE new_state = 'runnable') AS n
)
SELECT (SELECT count(*) FROM moved)::int, w.n::int
FROM woken w, LATERAL (SELECT CASE WHEN w.n > 0 THEN pg_notify('deckhand_runnable', $9::text) END) notify,
	LATERAL (SELECT count(*) FROM counted) c`
