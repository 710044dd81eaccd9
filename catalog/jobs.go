package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewJob is a validated job ready to be written. Tasks must be in dependency order
// (prerequisites first) so that ids grow along edges of the DAG.
type NewJob struct {
	Description string
	Kind        string
	SearchPath  string
	Settings    map[string]string
	Tasks       []NewTask
}

// NewTask is one task of a NewJob.
type NewTask struct {
	Name          string
	Kind          string
	Node          string // empty for kinds that need no node
	Group         string // alternatively a node group: any member that has replayed past MinLSN
	MinLSN        string
	Owner         string
	SQL           string
	Payload       json.RawMessage
	InTransaction bool
	MaxAttempts   int
	Timeout       time.Duration
	DependsOn     []string
}

// Job is a row of deckhand.jobs.
type Job struct {
	ID                int64      `json:"id" db:"id"`
	Description       string     `json:"description" db:"description"`
	Kind              string     `json:"kind" db:"kind"`
	SubmittedBy       string     `json:"submitted_by" db:"submitted_by"`
	State             string     `json:"state" db:"state"`
	TasksTotal        int        `json:"tasks_total" db:"tasks_total"`
	TasksDone         int        `json:"tasks_done" db:"tasks_done"`
	TasksFailed       int        `json:"tasks_failed" db:"tasks_failed"`
	TasksCancelled    int        `json:"tasks_cancelled" db:"tasks_cancelled"`
	TasksUnscheduled  int        `json:"tasks_unscheduled" db:"tasks_unscheduled"`
	TasksPending      int        `json:"tasks_pending" db:"tasks_pending"`
	CreatedAt         time.Time  `json:"created_at" db:"created_at"`
	StartedAt         *time.Time `json:"started_at" db:"started_at"`
	FinishedAt        *time.Time `json:"finished_at" db:"finished_at"`
	CancelRequestedAt *time.Time `json:"cancel_requested_at" db:"cancel_requested_at"`
}

// TaskError is what a failed attempt reported.
type TaskError struct {
	SQLState string `json:"sqlstate,omitempty"`
	Message  string `json:"message"`
	Detail   string `json:"detail,omitempty"`
	Hint     string `json:"hint,omitempty"`
}

func (e *TaskError) String() string {
	if e == nil {
		return ""
	}
	if e.SQLState != "" {
		return e.SQLState + ": " + e.Message
	}
	return e.Message
}

// Task is a task as users see it.
type Task struct {
	ID            int64      `json:"id" db:"id"`
	JobID         int64      `json:"job_id" db:"job_id"`
	Name          string     `json:"name" db:"name"`
	Kind          string     `json:"kind" db:"kind"`
	Node          *string    `json:"node" db:"node"`
	Owner         string     `json:"owner" db:"owner"`
	State         string     `json:"state" db:"state"`
	Attempts      int        `json:"attempts" db:"attempts"`
	MaxAttempts   int        `json:"max_attempts" db:"max_attempts"`
	Runs          int        `json:"runs" db:"runs"`
	NotBefore     *time.Time `json:"not_before" db:"not_before"`
	WorkerID      *int64     `json:"worker_id" db:"worker_id"`
	StartedAt     *time.Time `json:"started_at" db:"started_at"`
	FinishedAt    *time.Time `json:"finished_at" db:"finished_at"`
	TimeoutMS     int64      `json:"timeout_ms" db:"timeout_ms"`
	InTransaction bool       `json:"transaction" db:"in_transaction"`
	LastError     *TaskError `json:"last_error" db:"last_error"`
	DependsOn     []string   `json:"depends_on" db:"depends_on"`
	SQL           string     `json:"sql,omitempty" db:"sql"`
}

// Attempt is one execution of a task.
type Attempt struct {
	TaskID     int64      `json:"task_id" db:"task_id"`
	TaskName   string     `json:"task" db:"task_name"`
	Attempt    int        `json:"attempt" db:"attempt"`
	Token      int64      `json:"token" db:"token"`
	WorkerID   *int64     `json:"worker_id" db:"worker_id"`
	Outcome    string     `json:"outcome" db:"outcome"`
	StartedAt  time.Time  `json:"started_at" db:"started_at"`
	FinishedAt *time.Time `json:"finished_at" db:"finished_at"`
	SQLState   *string    `json:"sqlstate,omitempty" db:"sqlstate"`
	Message    *string    `json:"message,omitempty" db:"message"`
	Detail     *string    `json:"detail,omitempty" db:"detail"`
	Hint       *string    `json:"hint,omitempty" db:"hint"`
}

// InsertJob writes a job and its tasks in one transaction and wakes the workers.
func (c *Catalog) InsertJob(ctx context.Context, j NewJob) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var err error
		id, err = c.insertJob(ctx, tx, j)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("insert job: %w", err)
	}
	return id, nil
}

func (c *Catalog) insertJob(ctx context.Context, tx pgx.Tx, j NewJob) (int64, error) {
	settings := j.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	n := len(j.Tasks)
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO deckhand.job (description, kind, search_path, settings, tasks_total, created_at)
		VALUES ($1, $2, $3, $4, $5, coalesce($6, now())) RETURNING id`,
		j.Description, j.Kind, j.SearchPath, settings, n, c.now()).Scan(&id)
	if err != nil {
		return 0, err
	}
	if err := insertTasks(ctx, tx, id, 0, j.Tasks); err != nil {
		return 0, err
	}
	return id, nil
}

// insertTasks writes tasks of job id, in the order given (dependency order), so ids grow
// along the DAG's edges. Dependencies may name tasks already in the job. addedBy is the task
// that added them, or 0 at submission.
func insertTasks(ctx context.Context, tx pgx.Tx, jobID, addedBy int64, tasks []NewTask) error {
	n := len(tasks)
	names := make([]string, n)
	kinds := make([]string, n)
	nodes := make([]*string, n)
	groups := make([]*string, n)
	minLSNs := make([]*string, n)
	owners := make([]string, n)
	sqls := make([]string, n)
	payloads := make([][]byte, n)
	inTx := make([]bool, n)
	maxAttempts := make([]int32, n)
	timeouts := make([]float64, n)
	pending := make([]int32, n)
	var depTask, depOn []string
	for i, t := range tasks {
		names[i], kinds[i], owners[i], sqls[i] = t.Name, t.Kind, t.Owner, t.SQL
		nodes[i], groups[i], minLSNs[i] = nonEmpty(t.Node), nonEmpty(t.Group), nonEmpty(t.MinLSN)
		if len(t.Payload) > 0 {
			payloads[i] = t.Payload
		}
		inTx[i] = t.InTransaction
		maxAttempts[i] = int32(t.MaxAttempts)
		timeouts[i] = t.Timeout.Seconds()
		pending[i] = int32(len(t.DependsOn))
		for _, d := range t.DependsOn {
			depTask = append(depTask, t.Name)
			depOn = append(depOn, d)
		}
	}
	var addedByArg *int64
	if addedBy != 0 {
		addedByArg = &addedBy
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO deckhand.task (job_id, name, kind, node, node_group, min_lsn, owner, sql, payload,
			in_transaction, max_attempts, timeout, state, pending_deps, added_by)
		SELECT $1, name, kind, node, node_group, min_lsn::pg_lsn, owner, sql, payload, in_tx, max_attempts,
			make_interval(secs => timeout), CASE WHEN pending > 0 THEN 'blocked' ELSE 'runnable' END, pending, $13
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::jsonb[], $10::bool[], $11::int[], $12::float8[], $14::int[]) WITH ORDINALITY
			AS u(name, kind, node, node_group, min_lsn, owner, sql, payload, in_tx, max_attempts, timeout, pending, ord)
		ORDER BY ord`,
		jobID, names, kinds, nodes, groups, minLSNs, owners, sqls, payloads, inTx, maxAttempts, timeouts, addedByArg, pending)
	if err != nil {
		return err
	}
	if len(depTask) > 0 {
		_, err = tx.Exec(ctx, `
			INSERT INTO deckhand.task_dep (task_id, depends_on)
			SELECT t.id, p.id FROM unnest($2::text[], $3::text[]) AS d(task, dep)
			JOIN deckhand.task t ON t.job_id = $1 AND t.name = d.task
			JOIN deckhand.task p ON p.job_id = $1 AND p.name = d.dep`, jobID, depTask, depOn)
		if err != nil {
			return err
		}
	}
	if addedBy == 0 {
		return notifyRunnable(ctx, tx)
	}
	// Tasks added to a running job may depend on tasks that already finished: they wait only
	// for the prerequisites that have not.
	_, err = tx.Exec(ctx, `
		UPDATE deckhand.task t SET
			pending_deps = p.n, state = CASE WHEN p.n > 0 THEN 'blocked' ELSE 'runnable' END
		FROM (SELECT t.id, (SELECT count(*) FROM deckhand.task_dep d JOIN deckhand.task q ON q.id = d.depends_on
		                    WHERE d.task_id = t.id AND q.state <> 'done') AS n
		      FROM deckhand.task t WHERE t.job_id = $1 AND t.name = ANY ($2)) p
		WHERE t.id = p.id`, jobID, names)
	if err != nil {
		return err
	}
	return notifyRunnable(ctx, tx)
}

func notifyRunnable(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelRunnable)
	return err
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

const jobColumns = `id, description, kind, submitted_by, state, tasks_total, tasks_done, tasks_failed,
	tasks_cancelled, tasks_unscheduled, tasks_pending, created_at, started_at, finished_at, cancel_requested_at`

// JobFilter selects jobs for listing, newest first.
type JobFilter struct {
	State    string // empty for all
	BeforeID int64  // page: only jobs with id < BeforeID; 0 for the first page
	Limit    int    // 0 means 50
}

// Job reads one job.
func (c *Catalog) Job(ctx context.Context, id int64) (Job, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+jobColumns+` FROM deckhand.jobs WHERE id = $1`, id)
	job, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Job])
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return job, nil
}

// Tasks lists a job's tasks in id (dependency) order.
func (c *Catalog) Tasks(ctx context.Context, jobID int64) ([]Task, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT t.id, t.job_id, t.name, t.kind, t.node, t.owner, t.state, t.attempts, t.max_attempts, t.runs,
			nullif(t.not_before, '-infinity') AS not_before, t.worker_id, t.started_at, t.finished_at,
			(extract(epoch FROM t.timeout) * 1000)::bigint AS timeout_ms, t.in_transaction, t.last_error,
			ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
			      WHERE d.task_id = t.id ORDER BY p.id) AS depends_on, t.sql
		FROM deckhand.task t WHERE t.job_id = $1 ORDER BY t.id`, jobID)
	tasks, err := pgx.CollectRows(rows, pgx.RowToStructByName[Task])
	if err != nil {
		return nil, fmt.Errorf("read tasks of job %d: %w", jobID, err)
	}
	return tasks, nil
}

// Attempts lists every attempt of a job's tasks, including running ones, in start order.
func (c *Catalog) Attempts(ctx context.Context, jobID int64) ([]Attempt, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, task_name, attempt, token, worker_id, outcome, started_at, finished_at,
			sqlstate, message, detail, hint
		FROM deckhand.task_attempts WHERE job_id = $1 ORDER BY started_at, task_id, attempt`, jobID)
	attempts, err := pgx.CollectRows(rows, pgx.RowToStructByName[Attempt])
	if err != nil {
		return nil, fmt.Errorf("read attempts of job %d: %w", jobID, err)
	}
	return attempts, nil
}

// ErrJobTerminal is returned when cancelling a job that has already ended, or retrying one that has not.
var ErrJobTerminal = errors.New("job has ended")

// CancelJob cancels blocked and runnable tasks at once and marks running ones cancelling;
// the workers running them are told on ChannelCancel. It returns the job's new state.
func (c *Catalog) CancelJob(ctx context.Context, id int64) (string, error) {
	var state string
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		// Task rows are locked in id order before the job row, the order every writer uses.
		var cancelled int
		err := tx.QueryRow(ctx, `
			WITH target AS (
				SELECT id FROM deckhand.task WHERE job_id = $1 AND state IN ('blocked', 'runnable', 'running')
				ORDER BY id FOR UPDATE
			), moved AS (
				UPDATE deckhand.task t
				SET state = CASE WHEN t.state = 'running' THEN 'cancelling' ELSE 'cancelled' END,
				    finished_at = CASE WHEN t.state = 'running' THEN NULL ELSE coalesce($2, now()) END
				FROM target WHERE t.id = target.id
				RETURNING t.state
			)
			SELECT count(*) FILTER (WHERE state = 'cancelled') FROM moved`, id, c.now()).Scan(&cancelled)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			UPDATE deckhand.job SET cancel_requested_at = coalesce(cancel_requested_at, $3, now()),
				tasks_cancelled = tasks_cancelled + $2
			WHERE id = $1 AND state NOT IN ('finished', 'failed', 'cancelled')
			RETURNING state`, id, cancelled, c.now()).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := c.Job(ctx, id); err != nil {
				return err
			}
			return fmt.Errorf("job %d: %w", id, ErrJobTerminal)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelCancel, strconv.FormatInt(id, 10))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("cancel job %d: %w", id, err)
	}
	return state, nil
}

// RetryJob re-runs the failed, unscheduled and cancelled tasks of a failed or cancelled job,
// with their attempt counters reset. Tasks that finished are not run again.
func (c *Catalog) RetryJob(ctx context.Context, id int64) (string, error) {
	var state string
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var current string
		err := tx.QueryRow(ctx, `SELECT state FROM deckhand.job WHERE id = $1`, id).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if current != JobFailed && current != JobCancelled {
			return fmt.Errorf("job %d is %s: only failed or cancelled jobs can be retried", id, current)
		}
		// Prerequisites being reset still read as failed in this statement's snapshot,
		// so they count as pending for their dependents, as they should.
		_, err = tx.Exec(ctx, `
			WITH target AS (
				SELECT id FROM deckhand.task WHERE job_id = $1 AND state IN ('failed', 'unscheduled', 'cancelled')
				ORDER BY id FOR UPDATE
			), pending AS (
				SELECT target.id, (SELECT count(*) FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
				                   WHERE d.task_id = target.id AND p.state <> 'done') AS n
				FROM target
			)
			UPDATE deckhand.task t SET pending_deps = p.n,
				state = CASE WHEN p.n = 0 THEN 'runnable' ELSE 'blocked' END,
				attempts = 0, not_before = '-infinity', finished_at = NULL,
				node = CASE WHEN t.node_group IS NOT NULL THEN NULL ELSE t.node END
			FROM pending p WHERE t.id = p.id`, id)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			UPDATE deckhand.job SET cancel_requested_at = NULL, tasks_failed = 0, tasks_cancelled = 0,
				tasks_unscheduled = 0, finished_at = NULL
			WHERE id = $1 RETURNING state`, id).Scan(&state)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelRunnable)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("retry job %d: %w", id, err)
	}
	return state, nil
}
