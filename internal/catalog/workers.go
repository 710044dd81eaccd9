package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrLeaseLost is returned by Heartbeat when the worker was declared dead; it must stop
// its tasks at once (the leader may already have handed them to someone else) and re-register.
var ErrLeaseLost = errors.New("worker lease lost")

// RegisterWorker records a new worker process with a lease of ttl.
func (c *Catalog) RegisterWorker(ctx context.Context, name string, concurrency int, ttl time.Duration) (int64, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `
		INSERT INTO deckhand.worker (name, concurrency, started_at, heartbeat_at, lease_expires_at)
		VALUES ($1, $2, coalesce($4, now()), coalesce($4, now()), coalesce($4, now()) + $3::interval) RETURNING id`,
		name, concurrency, ttl, c.now()).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("register worker: %w", err)
	}
	return id, nil
}

// MayWork reports whether the catalog login may do a worker's writes (it holds deckhand_worker,
// owns the catalog or is a superuser), and the login's name. Table privileges alone, granted by
// mistake, are not enough: the tables' guard_writes trigger lets only those write, and this
// asks what it asks.
func (c *Catalog) MayWork(ctx context.Context) (role string, ok bool, err error) {
	err = c.Pool.QueryRow(ctx, `SELECT session_user::text,
		pg_catalog.has_table_privilege('deckhand.worker'::pg_catalog.text, 'INSERT'::pg_catalog.text)
		AND (pg_catalog.pg_has_role(current_user, 'deckhand_worker'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
		     OR EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
		                WHERE n.nspname OPERATOR(pg_catalog.=) 'deckhand'::pg_catalog.name
		                  AND n.nspowner OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r
		                                                         WHERE r.rolname OPERATOR(pg_catalog.=) current_user)))`).Scan(&role, &ok)
	if err != nil {
		return "", false, fmt.Errorf("read the catalog login's privileges: %w", err)
	}
	return role, ok, nil
}

// Stops are the tasks a worker runs that must stop: Cancel, whose job is being cancelled (their
// attempts end cancelled); Release, whose job was paused at once (their attempts are released,
// uncharged, and the tasks paused).
type Stops struct {
	Cancel  []int64
	Release []int64
}

// stopsSQL reads a worker's Stops ($1), through the index of active tasks by worker.
const stopsSQL = `ARRAY(SELECT id FROM deckhand.task WHERE worker_id = $1 AND state = 'cancelling'),
	ARRAY(SELECT id FROM deckhand.task WHERE worker_id = $1 AND state = 'running' AND pause = 'now')`

// Heartbeat extends the worker's lease and returns its tasks that must stop.
func (c *Catalog) Heartbeat(ctx context.Context, workerID int64, ttl time.Duration) (Stops, error) {
	var stops Stops
	err := c.Pool.QueryRow(ctx, `
		UPDATE deckhand.worker SET heartbeat_at = coalesce($3, now()), lease_expires_at = coalesce($3, now()) + $2::interval
		WHERE id = $1 AND stopped_at IS NULL
		RETURNING `+stopsSQL, workerID, ttl, c.now()).Scan(&stops.Cancel, &stops.Release)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stops{}, ErrLeaseLost
	}
	if err != nil {
		return Stops{}, fmt.Errorf("heartbeat: %w", err)
	}
	return stops, nil
}

// StoppingTasks returns the worker's tasks that must stop, because their job is being
// cancelled or was paused at once.
func (c *Catalog) StoppingTasks(ctx context.Context, workerID int64) (Stops, error) {
	var stops Stops
	if err := c.Pool.QueryRow(ctx, `SELECT `+stopsSQL, workerID).Scan(&stops.Cancel, &stops.Release); err != nil {
		return Stops{}, fmt.Errorf("read the tasks to stop: %w", err)
	}
	return stops, nil
}

// HeldAttempt is an attempt the catalog has a worker running: its task and fencing token.
type HeldAttempt struct {
	TaskID int64 `db:"id"`
	Token  int64 `db:"attempt_token"`
}

// HeldAttempts returns the attempts the catalog says the worker is running (or cancelling).
func (c *Catalog) HeldAttempts(ctx context.Context, workerID int64) ([]HeldAttempt, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT id, attempt_token FROM deckhand.task
		WHERE worker_id = $1 AND state IN ('running', 'cancelling')`, workerID)
	held, err := pgx.CollectRows(rows, pgx.RowToStructByName[HeldAttempt])
	if err != nil {
		return nil, fmt.Errorf("read the worker's attempts: %w", err)
	}
	return held, nil
}

// StopWorker marks a worker stopped and gives up its leadership, if it had it.
func (c *Catalog) StopWorker(ctx context.Context, workerID int64) error {
	_, err := c.Pool.Exec(ctx, `
		WITH resigned AS (DELETE FROM deckhand.leader WHERE worker_id = $1)
		UPDATE deckhand.worker SET stopped_at = coalesce($2, now()) WHERE id = $1 AND stopped_at IS NULL`,
		workerID, c.now())
	if err != nil {
		return fmt.Errorf("stop worker %d: %w", workerID, err)
	}
	return nil
}

// Workers lists workers that are alive or stopped recently, newest first.
func (c *Catalog) Workers(ctx context.Context, includeStopped bool) ([]deckhandtype.Worker, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, name, concurrency, started_at, heartbeat_at, lease_expires_at, stopped_at, alive, is_leader, running_tasks
		FROM deckhand.workers WHERE $1 OR stopped_at IS NULL ORDER BY id DESC LIMIT 1000`, includeStopped)
	workers, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Worker])
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return workers, nil
}

// TryLead takes or renews the leader lease for ttl. It returns true while the worker leads.
func (c *Catalog) TryLead(ctx context.Context, workerID int64, ttl time.Duration) (bool, error) {
	var leader int64
	err := c.Pool.QueryRow(ctx, `
		INSERT INTO deckhand.leader AS l (worker_id, elected_at, lease_expires_at)
		SELECT $1, coalesce($3, now()), coalesce($3, now()) + $2::interval
		-- Another worker's live lease: nothing to write. Without this, every candidate locked
		-- the leader's row every round, a write and a WAL flush per worker per second.
		WHERE NOT EXISTS (SELECT 1 FROM deckhand.leader c WHERE c.worker_id <> $1 AND c.lease_expires_at >= coalesce($3, now()))
		ON CONFLICT (singleton) DO UPDATE SET
			worker_id = $1,
			elected_at = CASE WHEN l.worker_id = $1 THEN l.elected_at ELSE coalesce($3, now()) END,
			lease_expires_at = coalesce($3, now()) + $2::interval
		WHERE l.worker_id = $1 OR l.lease_expires_at < coalesce($3, now())
		RETURNING worker_id`, workerID, ttl, c.now()).Scan(&leader)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("leader election: %w", err)
	}
	return leader == workerID, nil
}

// Leader returns the current leader's worker id, or 0 when there is none. It reads the view
// deckhand.workers, which every catalog role may read.
func (c *Catalog) Leader(ctx context.Context) (int64, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `SELECT id FROM deckhand.workers WHERE is_leader`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read leader: %w", err)
	}
	return id, nil
}

// Orphan is a task whose worker was declared dead while the task ran.
type Orphan struct {
	TaskID   int64   `db:"id"`
	Token    int64   `db:"attempt_token"`
	WorkerID int64   `db:"worker_id"`
	Node     *string `db:"node"`
	NodeDSN  *string `db:"node_dsn"`
	Owner    string  `db:"owner"`
	// SubmittedBy is the job's submitter, who must be a member of Owner on the node.
	SubmittedBy string `db:"submitted_by"`
	// InTransaction: the attempt ran in one transaction; only then can the node tell whether
	// it took effect.
	InTransaction bool `db:"in_transaction"`
}

// ExpireWorkers declares dead every worker whose lease has run out and returns the tasks they
// held. The caller terminates each orphan's backend on its node, then reports OutcomeLost
// through Complete; the token fences the rescue against a worker that comes back.
//
// The leader runs it every round, and almost always no worker is dead: the workers that hold
// tasks come from the index of active tasks one probe each (a loose index scan), and only the
// tasks of those that are gone are read. A round costs the number of workers, not the number
// of running tasks: over 1,000 running tasks, reading every one to check its worker took 458
// buffers and about 3 ms a round.
func (c *Catalog) ExpireWorkers(ctx context.Context) ([]Orphan, error) {
	rows, _ := c.Pool.Query(ctx, expireWorkersSQL, c.now())
	orphans, err := pgx.CollectRows(rows, pgx.RowToStructByName[Orphan])
	if err != nil {
		return nil, fmt.Errorf("expire workers: %w", err)
	}
	return orphans, nil
}

// Setting reads a catalog-wide setting, or def when it is not set.
func (c *Catalog) Setting(ctx context.Context, name, def string) (string, error) {
	var v string
	err := c.Pool.QueryRow(ctx, `SELECT value FROM deckhand.setting WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return def, nil
	}
	if err != nil {
		return "", fmt.Errorf("read setting %s: %w", name, err)
	}
	return v, nil
}

// SetSetting stores a catalog-wide setting; an empty value removes it (admins only:
// deckhand.set_setting).
func (c *Catalog) SetSetting(ctx context.Context, name, value string) error {
	var v *string
	if value != "" {
		v = &value
	}
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.set_setting($1, $2)`, name, v)
	return callError(err)
}

// Settings lists the settings that are set (admins and workers may read them).
func (c *Catalog) Settings(ctx context.Context) (map[string]string, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT name, value FROM deckhand.setting ORDER BY name`)
	out := map[string]string{}
	var name, value string
	_, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		out[name] = value
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// Only admins and workers may read the table: say so as the catalog's functions say
		// what takes an admin, rather than with PostgreSQL's "permission denied for table".
		var role string
		if c.Pool.QueryRow(ctx, `SELECT session_user`).Scan(&role) == nil {
			return nil, &refusal{fmt.Sprintf("%s may not read settings: that takes a deckhand admin (GRANT deckhand_admin TO %s)",
				role, pgx.Identifier{role}.Sanitize()), ErrForbidden}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	return out, nil
}

// DeleteFinishedJobs removes up to limit jobs that ended before cutoff (with their tasks and
// attempts) and workers stopped before it. It returns how many jobs it removed.
func (c *Catalog) DeleteFinishedJobs(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := c.Pool.Exec(ctx, `
		WITH old_workers AS (
			DELETE FROM deckhand.worker WHERE stopped_at < $1
		)
		DELETE FROM deckhand.job WHERE id IN (
			SELECT id FROM deckhand.job WHERE finished_at < $1 AND state IN ('finished', 'failed', 'cancelled')
			-- A job whose row a caller of deckhand.retry keeps locked (locks.go) waits for
			-- a later round rather than hold back the removal of every other.
			ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("retention: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteUnusedExportDestinations removes up to limit rows of deckhand.export_destination
// that no export names any longer (retention removed their exports with their jobs), so that
// the table, which every submission to a new destination adds to, does not grow without end.
// A row a submission holds is passed (SKIP LOCKED); one removed while a submission waits for
// it is made again by that submission's upsert. It returns how many it removed.
//
// The rows are locked first, then removed by a statement of their own whose snapshot comes
// after the locks, if still no export names them: one statement would judge them on a snapshot
// taken before it locked them, and remove the row of an export whose submission committed
// (and released the row) in between. A submission in a REPEATABLE READ transaction whose
// snapshot predates that export would then make the row anew, find no export, and be
// admitted beside it; it is refused when it finds the row the other submission wrote.
func (c *Catalog) DeleteUnusedExportDestinations(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := pgx.BeginTxFunc(ctx, c.Pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT d.destination FROM deckhand.export_destination d
			WHERE NOT EXISTS (SELECT 1 FROM deckhand.export e WHERE e.destination = d.destination)
			LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		unused, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(unused) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, `
			DELETE FROM deckhand.export_destination d WHERE d.destination = ANY($1)
			AND NOT EXISTS (SELECT 1 FROM deckhand.export e WHERE e.destination = d.destination)`, unused)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retention: export destinations: %w", err)
	}
	return n, nil
}

// expireWorkersSQL is ExpireWorkers' statement ($1 the injected time or NULL). The update's
// effect is not in the statement's snapshot, so a worker it declares dead is told apart by its
// id (dead), and one gone before (stopped, or its row removed) by its row.
const expireWorkersSQL = `
		WITH RECURSIVE dead AS (
			UPDATE deckhand.worker SET stopped_at = coalesce($1, now())
			WHERE stopped_at IS NULL AND lease_expires_at < coalesce($1, now())
			RETURNING id
		), holders(worker_id) AS (
			(SELECT t.worker_id FROM deckhand.task t
			 WHERE t.state IN ('running', 'cancelling') AND t.worker_id IS NOT NULL
			 ORDER BY t.worker_id LIMIT 1)
			UNION ALL
			SELECT (SELECT t.worker_id FROM deckhand.task t
			        WHERE t.state IN ('running', 'cancelling') AND t.worker_id > h.worker_id
			        ORDER BY t.worker_id LIMIT 1)
			FROM holders h WHERE h.worker_id IS NOT NULL
		), gone AS MATERIALIZED (
			SELECT h.worker_id FROM holders h
			WHERE h.worker_id IS NOT NULL
			  AND (h.worker_id IN (SELECT id FROM dead)
			       OR NOT EXISTS (SELECT 1 FROM deckhand.worker w WHERE w.id = h.worker_id AND w.stopped_at IS NULL))
		), orphaned AS (
			SELECT o.* FROM gone g CROSS JOIN LATERAL (
				SELECT t.id, t.attempt_token, t.worker_id, t.node, t.owner, t.job_id, t.in_transaction FROM deckhand.task t
				WHERE t.worker_id = g.worker_id AND t.state IN ('running', 'cancelling')) o
			UNION ALL
			-- Held by no worker at all: no claim leaves a task so, but the row says it runs.
			-- In the index's order, as every probe here: no plan reads the table for them.
			(SELECT t.id, t.attempt_token, t.worker_id, t.node, t.owner, t.job_id, t.in_transaction FROM deckhand.task t
			 WHERE t.worker_id IS NULL AND t.state IN ('running', 'cancelling')
			 ORDER BY t.worker_id LIMIT 1000)
		)
		SELECT o.id, o.attempt_token, o.worker_id, o.node, n.dsn AS node_dsn, o.owner, j.submitted_by, o.in_transaction
		FROM orphaned o JOIN deckhand.job j ON j.id = o.job_id LEFT JOIN deckhand.node n ON n.name = o.node
		ORDER BY o.id`
