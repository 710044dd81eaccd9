package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// NewJob is a validated job ready to be written. Tasks must be in dependency order
// (prerequisites first) so that ids grow along edges of the DAG.
type NewJob struct {
	Description string
	Kind        string
	SearchPath  string
	Settings    map[string]string
	// Key, when not empty, is held by the job until it ends: a submission with a key that an
	// unfinished job of the same submitter holds is refused with a *DuplicateKeyError.
	Key string
	// Priority orders claims among runnable tasks on a node, higher first (-100 to 100); each
	// point weighs as a minute of waiting (see claim.go).
	Priority int
	Tasks    []NewTask
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

// MaxErrorText bounds each field of an error the catalog keeps. A task chooses the size of its
// own error (RAISE with a string of hundreds of megabytes): jsonb cannot hold a string beyond
// 256 MB, and a worker whose results the catalog refuses retries them for ever, holding back
// every other result it has.
const MaxErrorText = 16 << 10

// clipped is e with each field cut to MaxErrorText bytes, on a character boundary.
func clipped(e *deckhandtype.TaskError) *deckhandtype.TaskError {
	if e == nil {
		return nil
	}
	return &deckhandtype.TaskError{SQLState: ClipText(e.SQLState), Message: ClipText(e.Message), Detail: ClipText(e.Detail), Hint: ClipText(e.Hint)}
}

// ClipText cuts s to MaxErrorText bytes, on a character boundary, saying how much was left out.
func ClipText(s string) string {
	if len(s) <= MaxErrorText {
		return s
	}
	cut := MaxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:cut], len(s)-cut)
}

// InsertJob submits a job through deckhand.submit_job, as the catalog session's user, who
// becomes its submitter for good; the workers are woken. Tasks must be in dependency order.
func (c *Catalog) InsertJob(ctx context.Context, j NewJob) (int64, error) {
	spec, err := submitSpec(j)
	if err != nil {
		return 0, fmt.Errorf("submit job: %w", err)
	}
	var id int64
	if err := c.Pool.QueryRow(ctx, `SELECT deckhand.submit_job($1::jsonb)`, spec).Scan(&id); err != nil {
		return 0, callError(err)
	}
	return id, nil
}

// deckhand.submit_job's defaults for a task that names no max_attempts, timeout or
// transaction (0016_fast_submit.sql).
const (
	submitDefaultMaxAttempts = 3
	submitDefaultTimeout     = time.Hour
)

// submitSpec is the JSON deckhand.submit_job reads.
func submitSpec(j NewJob) ([]byte, error) {
	type task struct {
		Name      string          `json:"name"`
		Kind      string          `json:"kind"`
		Node      string          `json:"node,omitempty"`
		Owner     string          `json:"owner,omitempty"`
		SQL       string          `json:"sql,omitempty"`
		Payload   json.RawMessage `json:"payload,omitempty"`
		DependsOn []string        `json:"depends_on,omitempty"`
		// Absent when they are deckhand.submit_job's defaults: 100,000 tasks made 13 MB of
		// JSON with them and 8 MB without, and the server parses every byte.
		MaxAttempts *int     `json:"max_attempts,omitempty"`
		Timeout     *float64 `json:"timeout,omitempty"` // seconds
		Transaction *bool    `json:"transaction,omitempty"`
	}
	tasks := make([]task, len(j.Tasks))
	for i, t := range j.Tasks {
		if t.Group != "" || t.MinLSN != "" {
			return nil, errors.New("tasks that target a node group are added by deckhand itself")
		}
		tasks[i] = task{Name: t.Name, Kind: t.Kind, Node: t.Node, Owner: t.Owner, SQL: t.SQL, Payload: t.Payload,
			DependsOn: t.DependsOn}
		if t.MaxAttempts != submitDefaultMaxAttempts {
			tasks[i].MaxAttempts = &t.MaxAttempts
		}
		if t.Timeout != submitDefaultTimeout {
			seconds := t.Timeout.Seconds()
			tasks[i].Timeout = &seconds
		}
		if !t.InTransaction {
			tasks[i].Transaction = &t.InTransaction
		}
	}
	settings := j.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	spec := map[string]any{
		"description": j.Description, "kind": j.Kind, "search_path": j.SearchPath, "settings": settings, "tasks": tasks,
	}
	if j.Key != "" {
		spec["key"] = j.Key
	}
	if j.Priority != 0 {
		spec["priority"] = j.Priority
	}
	return json.Marshal(spec)
}

// insertTasks adds tasks to job jobID on behalf of addedBy, a task of the job that is running
// (0: the job's own tasks, as a schedule's firing writes them), in the order given (dependency order), so ids grow along the DAG's edges, and returns their
// ids in that order. Dependencies may name tasks already in the job; names are unique in a
// job. Ids are taken first and names resolved here, so that no statement looks a name up in
// the task table once per dependency.
func insertTasks(ctx context.Context, tx pgx.Tx, jobID, addedBy int64, tasks []NewTask) ([]int64, error) {
	n := len(tasks)
	var ids []int64
	err := tx.QueryRow(ctx, `SELECT ARRAY(SELECT nextval('deckhand.task_id_seq') FROM generate_series(1, $1) ORDER BY 1)`, n).Scan(&ids)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int64, n)
	names := make([]string, n)
	for i, t := range tasks {
		if _, dup := byName[t.Name]; dup {
			return nil, fmt.Errorf("duplicate task name %q", t.Name)
		}
		byName[t.Name], names[i] = ids[i], t.Name
	}
	older := map[string]int64{} // tasks already in the job that are named here
	rows, _ := tx.Query(ctx, `SELECT name, id FROM deckhand.task WHERE job_id = $1 AND name = ANY ($2)`,
		jobID, slices.Concat(names, prerequisites(tasks)))
	var name string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&name, &id}, func() error {
		if _, dup := byName[name]; dup {
			return fmt.Errorf("job %d already has a task named %q", jobID, name)
		}
		older[name] = id
		return nil
	})
	if err != nil {
		return nil, err
	}
	var olderIDs []int64
	for name, id := range older {
		byName[name], olderIDs = id, append(olderIDs, id)
	}
	needed := map[int64]bool{}
	var depTask, depOn, recount []int64
	for i, t := range tasks {
		for _, d := range t.DependsOn {
			p, ok := byName[d]
			if !ok {
				return nil, fmt.Errorf("task %q depends on %q, which is not in job %d", t.Name, d, jobID)
			}
			depTask, depOn = append(depTask, ids[i]), append(depOn, p)
			needed[p] = true
			if p < ids[0] && (len(recount) == 0 || recount[len(recount)-1] != ids[i]) {
				recount = append(recount, ids[i])
			}
		}
	}
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
	hasDependents := make([]bool, n)
	for i, t := range tasks {
		kinds[i], owners[i], sqls[i] = t.Kind, t.Owner, t.SQL
		nodes[i], groups[i], minLSNs[i] = nonEmpty(t.Node), nonEmpty(t.Group), nonEmpty(t.MinLSN)
		if len(t.Payload) > 0 {
			payloads[i] = t.Payload
		}
		inTx[i] = t.InTransaction
		maxAttempts[i] = int32(t.MaxAttempts)
		timeouts[i] = t.Timeout.Seconds()
		pending[i] = int32(len(t.DependsOn))
		hasDependents[i] = needed[ids[i]]
	}
	// Task rows are locked before the job row, the order every writer uses.
	if len(olderIDs) > 0 {
		_, err = tx.Exec(ctx, `UPDATE deckhand.task SET has_dependents = true WHERE id = ANY ($1) AND NOT has_dependents`, olderIDs)
		if err != nil {
			return nil, err
		}
	}
	// A paused job's new tasks are paused. The job row stays locked until the transaction
	// ends, so a pause or resume that commits meanwhile waits and then sees these tasks. The
	// tasks take their place in the claim order from the job (see claim.go).
	var pause *string
	var claimKey time.Time
	err = tx.QueryRow(ctx, `SELECT pause, created_at - make_interval(mins => priority) FROM deckhand.job WHERE id = $1 FOR NO KEY UPDATE`,
		jobID).Scan(&pause, &claimKey)
	if err != nil {
		return nil, err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO deckhand.task (id, job_id, name, kind, node, node_group, min_lsn, owner, sql, payload,
			in_transaction, max_attempts, timeout, state, pending_deps, added_by, has_dependents, pause, claim_key)
		SELECT id, @job, name, kind, node, node_group, min_lsn::pg_lsn, owner, sql, payload, in_tx, max_attempts,
			make_interval(secs => timeout),
			CASE WHEN pending > 0 THEN 'blocked' WHEN @pause::text IS NOT NULL THEN 'paused' ELSE 'runnable' END, pending,
			@added_by, has_dependents, @pause, @claim_key
		FROM unnest(@ids::bigint[], @names::text[], @kinds::text[], @nodes::text[], @groups::text[], @min_lsns::text[],
			@owners::text[], @sqls::text[], @payloads::jsonb[], @in_tx::bool[], @max_attempts::int[], @timeouts::float8[],
			@pending::int[], @has_dependents::bool[])
			AS u(id, name, kind, node, node_group, min_lsn, owner, sql, payload, in_tx, max_attempts, timeout, pending,
			     has_dependents)`,
		pgx.StrictNamedArgs{"job": jobID, "added_by": nonZero(addedBy), "ids": ids, "names": names, "kinds": kinds, "nodes": nodes,
			"groups": groups, "min_lsns": minLSNs, "owners": owners, "sqls": sqls, "payloads": payloads, "in_tx": inTx,
			"max_attempts": maxAttempts, "timeouts": timeouts, "pending": pending, "has_dependents": hasDependents,
			"pause": pause, "claim_key": claimKey})
	if err != nil {
		return nil, err
	}
	if len(depTask) > 0 {
		_, err = tx.Exec(ctx, `INSERT INTO deckhand.task_dep (task_id, depends_on) SELECT * FROM unnest($1::bigint[], $2::bigint[])`,
			depTask, depOn)
		if err != nil {
			return nil, err
		}
	}
	if len(recount) == 0 {
		return ids, notifyRunnable(ctx, tx)
	}
	// Tasks added to a running job may depend on tasks that already finished: they wait only
	// for the prerequisites that have not.
	_, err = tx.Exec(ctx, `
		UPDATE deckhand.task t SET
			pending_deps = p.n,
			state = CASE WHEN p.n > 0 THEN 'blocked' WHEN t.pause IS NOT NULL THEN 'paused' ELSE 'runnable' END
		FROM (SELECT id, (SELECT count(*) FROM deckhand.task_dep d JOIN deckhand.task q ON q.id = d.depends_on
		                  WHERE d.task_id = u.id AND q.state <> 'done') AS n
		      FROM unnest($1::bigint[]) AS u(id)) p
		WHERE t.id = p.id`, recount)
	if err != nil {
		return nil, err
	}
	return ids, notifyRunnable(ctx, tx)
}

// prerequisites lists the names tasks depend on.
func prerequisites(tasks []NewTask) []string {
	var names []string
	for _, t := range tasks {
		names = append(names, t.DependsOn...)
	}
	return names
}

func notifyRunnable(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelRunnable)
	return err
}

func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

const jobColumns = `id, description, kind, submitted_by, state, tasks_total, tasks_done, tasks_failed,
	tasks_cancelled, tasks_unscheduled, tasks_pending, created_at, started_at, finished_at, cancel_requested_at, key, paused_at, priority`

// JobNotifyKey is the key by which the job's state changes are notified on ChannelJob
// ("<key>:<state>"): a job may be waited for only by those who may see it.
func (c *Catalog) JobNotifyKey(ctx context.Context, id int64) (string, error) {
	var key string
	err := c.Pool.QueryRow(ctx, `SELECT notify_key::text FROM deckhand.jobs WHERE id = $1`, id).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("read job %d: %w", id, err)
	}
	return key, nil
}

// Job reads one job.
func (c *Catalog) Job(ctx context.Context, id int64) (deckhandtype.Job, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+jobColumns+` FROM deckhand.jobs WHERE id = $1`, id)
	job, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[deckhandtype.Job])
	if errors.Is(err, pgx.ErrNoRows) {
		return deckhandtype.Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return deckhandtype.Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return job, nil
}

// Tasks lists a page of a job's tasks in id (dependency) order.
func (c *Catalog) Tasks(ctx context.Context, jobID int64, page deckhandtype.TaskPage) ([]deckhandtype.Task, error) {
	var limit *int
	if page.Limit > 0 {
		limit = &page.Limit
	}
	rows, _ := c.Pool.Query(ctx, tasksPageSQL, jobID, page.After, limit)
	tasks, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Task])
	if err != nil {
		return nil, fmt.Errorf("read tasks of job %d: %w", jobID, err)
	}
	return tasks, nil
}

// tasksPageSQL reads a page of a job's tasks through the view, which shows only the jobs the
// caller may act on. The view is a security barrier: a page's ORDER BY and LIMIT stay outside
// it, and every task of the job had its prerequisites listed before the page was cut (0.9 s a
// page for a job of 100,000 tasks). So the page's last id comes first, from the view's ids
// alone, and bounds the tasks whose columns are computed.
const tasksPageSQL = `
SELECT t.id, t.job_id, t.name, t.kind, t.node, t.owner, t.state, t.attempts, t.max_attempts, t.runs,
	nullif(t.not_before, '-infinity') AS not_before, t.worker_id, t.started_at, t.finished_at,
	(extract(epoch FROM t.timeout) * 1000)::bigint AS timeout_ms, t.in_transaction,
	t.error AS last_error, t.depends_on_in_order AS depends_on, t.sql
FROM deckhand.tasks t
WHERE t.job_id = $1 AND t.id > $2
  AND t.id <= (SELECT max(p.id) FROM (SELECT p.id FROM deckhand.tasks p WHERE p.job_id = $1 AND p.id > $2
                                      ORDER BY p.id LIMIT $3) p)
ORDER BY t.id`

// Attempts lists every attempt of a job's tasks whose ids are above after and at most upTo
// (0: no bound), including running ones, in start order.
func (c *Catalog) Attempts(ctx context.Context, jobID, after, upTo int64) ([]deckhandtype.Attempt, error) {
	var bound *int64
	if upTo > 0 {
		bound = &upTo
	}
	rows, _ := c.Pool.Query(ctx, `
		SELECT task_id, task_name, attempt, token, worker_id, outcome, started_at, finished_at,
			sqlstate, message, detail, hint
		FROM deckhand.task_attempts WHERE job_id = $1 AND task_id > $2 AND task_id <= coalesce($3, task_id)
		ORDER BY started_at, task_id, attempt`, jobID, after, bound)
	attempts, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Attempt])
	if err != nil {
		return nil, fmt.Errorf("read attempts of job %d: %w", jobID, err)
	}
	return attempts, nil
}

// ErrJobTerminal is returned when cancelling a job that has already ended, or retrying one that has not.
var ErrJobTerminal = errors.New("job has ended")

// CancelJob cancels blocked and runnable tasks at once and marks running ones cancelling;
// the workers running them are told on ChannelCancel. It returns the job's new state. The
// caller must be the job's submitter, a member of every owner of its tasks, or an admin
// (deckhand.cancel checks, with the caller's identity).
func (c *Catalog) CancelJob(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	var state deckhandtype.JobState
	if err := c.Pool.QueryRow(ctx, `SELECT deckhand.cancel($1)`, id).Scan(&state); err != nil {
		return "", callError(err)
	}
	return state, nil
}

// PauseJob stops new claims of a job's tasks: those that would be claimable are paused. With
// now, its running tasks are cancelled on their nodes and released without charging an
// attempt; otherwise they finish. It returns the job's state: pausing while tasks of it still
// run, then paused. The caller must be allowed to act on the job, as for CancelJob.
func (c *Catalog) PauseJob(ctx context.Context, id int64, now bool) (deckhandtype.JobState, error) {
	var state deckhandtype.JobState
	if err := c.Pool.QueryRow(ctx, `SELECT deckhand.pause($1, $2)`, id, now).Scan(&state); err != nil {
		return "", callError(err)
	}
	return state, nil
}

// ResumeJob makes a paused or pausing job's tasks claimable again and returns its state.
func (c *Catalog) ResumeJob(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	var state deckhandtype.JobState
	if err := c.Pool.QueryRow(ctx, `SELECT deckhand.resume($1)`, id).Scan(&state); err != nil {
		return "", callError(err)
	}
	return state, nil
}

// ReleaseWhilePaused releases a running task whose job is being paused, once no other task
// of its job runs, as a pause "now" would: its pause becomes "now", and its worker, told
// through deckhand_cancel, cancels it and records the attempt released (uncharged; the task
// is then paused, and runs again after the resume). It is for a task that only waits on its
// job's other tasks (an export's coordinator, on its parts): once they are paused it could
// only hold on to what it holds until the resume, and its job would stay pausing. It reports
// whether it marked the task. Guarded by the attempt token and the pause mode: after a resume,
// or from an attempt that is over, it does nothing.
func (c *Catalog) ReleaseWhilePaused(ctx context.Context, taskID, token int64) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.task t SET pause = 'now'
		WHERE t.id = $1 AND t.attempt_token = $2 AND t.state = 'running' AND t.pause = 'wait'
		  AND NOT EXISTS (SELECT 1 FROM deckhand.task o
		                  WHERE o.job_id = t.job_id AND o.id <> t.id AND o.state IN ('running', 'cancelling'))
		RETURNING pg_notify($3, '')`, taskID, token, ChannelCancel)
	if err != nil {
		return false, fmt.Errorf("release task %d of its paused job: %w", taskID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// RetryJob re-runs the failed, unscheduled and cancelled tasks of a failed or cancelled job,
// with their attempt counters reset. Tasks that finished are not run again. The caller must
// be allowed to act on the job, as for CancelJob.
func (c *Catalog) RetryJob(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	var state deckhandtype.JobState
	if err := c.Pool.QueryRow(ctx, `SELECT deckhand.retry($1)`, id).Scan(&state); err != nil {
		return "", callError(err)
	}
	return state, nil
}
