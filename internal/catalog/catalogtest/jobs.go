package catalogtest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// WorkerOpts describes a worker.
type WorkerOpts struct {
	// LeaseExpiresAt is when its lease runs out; zero: an hour after the database's now().
	LeaseExpiresAt time.Time
	Stopped        bool
}

// Worker inserts a worker and returns its id.
func Worker(ctx context.Context, tb testing.TB, db DB, opts *WorkerOpts) int64 {
	tb.Helper()
	if opts == nil {
		opts = &WorkerOpts{}
	}
	var lease *time.Time
	if !opts.LeaseExpiresAt.IsZero() {
		lease = &opts.LeaseExpiresAt
	}
	var id int64
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at, stopped_at)
		VALUES ($1, 8, coalesce($2, now() + interval '1 hour'), CASE WHEN $3 THEN now() END) RETURNING id`,
		unique("worker"), lease, opts.Stopped).Scan(&id)
	if err != nil {
		tb.Fatalf("catalogtest: insert worker: %v", err)
	}
	return id
}

// NodeOpts describes a node.
type NodeOpts struct {
	Name     string // unique when empty
	Group    string // the name when empty
	Role     string // primary when empty
	MaxTasks int    // 4 when zero
}

// Node inserts a node (whose conninfo leads nowhere) and returns its name.
func Node(ctx context.Context, tb testing.TB, db DB, opts *NodeOpts) string {
	tb.Helper()
	o := *opts
	if o.Name == "" {
		o.Name = unique("node")
	}
	if o.Group == "" {
		o.Group = o.Name
	}
	if o.Role == "" {
		o.Role = "primary"
	}
	if o.MaxTasks == 0 {
		o.MaxTasks = 4
	}
	exec(ctx, tb, db, `INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ($1, 'host=/nonexistent', $2, $3, $4)`,
		o.Name, o.Group, o.Role, o.MaxTasks)
	return o.Name
}

// JobOpts describes a job and its tasks.
type JobOpts struct {
	// State asks for a job in that state. Without Tasks, the job gets tasks that make
	// deckhand.derive_job_state say so; with Tasks, the factory checks that they do.
	State deckhandtype.JobState
	Tasks []TaskOpts
	// Started marks the job started although none of its tasks has run (a retried job);
	// a job with a task that has run is started anyway.
	Started         bool
	CancelRequested bool
	Kind            string // sql when empty
	// Pause is the job's pause mode, wait or now: its tasks that can still run carry it. A
	// job with a paused task is paused (wait) when Pause is empty.
	Pause string
}

// TaskOpts describes a task of a job.
type TaskOpts struct {
	Name      string                 // t1, t2, ... by position when empty
	Kind      string                 // noop when empty
	Node      string                 // none when empty
	State     deckhandtype.TaskState // runnable when empty
	DependsOn []string               // names of tasks listed before it
	// Attempts charged against MaxAttempts; a task that has run has at least one.
	Attempts    int
	MaxAttempts int // 3 when zero
	// WorkerID is the worker of a running or cancelling task; zero: a new worker whose lease
	// is fresh.
	WorkerID  int64
	NotBefore time.Time // zero: -infinity, claimable at once
	AddedBy   string    // name of the task that added it to the job, as an export's parts
}

// JobRow is an inserted job.
type JobRow struct {
	ID    int64
	State deckhandtype.JobState
	Tasks []TaskRow // in the order of JobOpts.Tasks
}

// Task returns the task named name.
func (j JobRow) Task(name string) TaskRow {
	for _, t := range j.Tasks {
		if t.Name == name {
			return t
		}
	}
	panic("catalogtest: job has no task " + name)
}

// TaskRow is an inserted task.
type TaskRow struct {
	ID       int64
	JobID    int64
	Name     string
	State    deckhandtype.TaskState
	Token    int64 // attempt token of its current or last attempt; 0 if it never ran
	WorkerID int64 // its worker while it runs
}

// jobShapes are the tasks that give a job each state.
var jobShapes = map[deckhandtype.JobState]JobOpts{
	deckhandtype.JobScheduled:  {Tasks: []TaskOpts{{State: deckhandtype.TaskRunnable}}},
	deckhandtype.JobRunning:    {Tasks: []TaskOpts{{State: deckhandtype.TaskRunning}}},
	deckhandtype.JobFailing:    {Tasks: []TaskOpts{{State: deckhandtype.TaskFailed}, {State: deckhandtype.TaskRunning}}},
	deckhandtype.JobCancelling: {CancelRequested: true, Tasks: []TaskOpts{{State: deckhandtype.TaskCancelling}}},
	deckhandtype.JobFinished:   {Tasks: []TaskOpts{{State: deckhandtype.TaskDone}}},
	deckhandtype.JobFailed:     {Tasks: []TaskOpts{{State: deckhandtype.TaskFailed}}},
	deckhandtype.JobCancelled:  {CancelRequested: true, Tasks: []TaskOpts{{State: deckhandtype.TaskCancelled}}},
	deckhandtype.JobPausing:    {Pause: "wait", Tasks: []TaskOpts{{State: deckhandtype.TaskRunning}, {State: deckhandtype.TaskPaused}}},
	deckhandtype.JobPaused:     {Pause: "wait", Tasks: []TaskOpts{{State: deckhandtype.TaskDone}, {State: deckhandtype.TaskPaused}}},
}

// ran reports whether a task in state s has had an attempt.
func ran(s deckhandtype.TaskState) bool {
	return s == deckhandtype.TaskRunning || s == deckhandtype.TaskCancelling || s == deckhandtype.TaskDone || s == deckhandtype.TaskFailed
}

// Job inserts a job and its tasks. Its counters follow from its tasks' states, so its state
// is derived as deckhand derives it.
func Job(ctx context.Context, tb testing.TB, db DB, opts *JobOpts) JobRow {
	tb.Helper()
	o := *opts
	if len(o.Tasks) == 0 {
		shape, ok := jobShapes[o.State]
		if !ok {
			tb.Fatalf("catalogtest: a job without tasks in state %q", o.State)
		}
		o.Tasks, o.CancelRequested = shape.Tasks, o.CancelRequested || shape.CancelRequested
		if o.Pause == "" {
			o.Pause = shape.Pause
		}
	}
	o.Tasks = append([]TaskOpts(nil), o.Tasks...) // defaults are filled in below
	if o.Kind == "" {
		o.Kind = "sql"
	}
	count := map[deckhandtype.TaskState]int{}
	started := o.Started
	for i, t := range o.Tasks {
		if t.State == "" {
			o.Tasks[i].State = deckhandtype.TaskRunnable
		}
		count[o.Tasks[i].State]++
		started = started || ran(o.Tasks[i].State)
	}
	if o.Pause == "" && count[deckhandtype.TaskPaused] > 0 {
		o.Pause = "wait"
	}
	waitsFor := 0
	if o.Pause != "" {
		waitsFor = count[deckhandtype.TaskRunning]
	}
	job := JobRow{Tasks: make([]TaskRow, len(o.Tasks))}
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.job (kind, owners, tasks_total, tasks_done, tasks_failed, tasks_cancelled, tasks_unscheduled,
			started_at, cancel_requested_at, pause, paused_at, pause_waits_for)
		VALUES (@kind, '{app}', @total, @done, @failed, @cancelled, @unscheduled,
			CASE WHEN @started THEN now() END, CASE WHEN @cancel THEN now() END,
			nullif(@pause, ''), CASE WHEN @pause <> '' THEN now() END, @waits_for)
		RETURNING id`,
		pgx.StrictNamedArgs{"kind": o.Kind, "total": len(o.Tasks), "done": count[deckhandtype.TaskDone],
			"failed": count[deckhandtype.TaskFailed], "cancelled": count[deckhandtype.TaskCancelled],
			"unscheduled": count[deckhandtype.TaskUnscheduled], "started": started, "cancel": o.CancelRequested,
			"pause": o.Pause, "waits_for": waitsFor},
	).Scan(&job.ID)
	if err != nil {
		tb.Fatalf("catalogtest: insert job: %v", err)
	}
	ids := map[string]int64{}
	states := map[string]deckhandtype.TaskState{}
	for i, t := range o.Tasks {
		if t.Name == "" {
			t.Name = "t" + strconv.Itoa(i+1)
		}
		job.Tasks[i] = insertTask(ctx, tb, db, job.ID, o.Pause, t, ids, states)
		ids[t.Name], states[t.Name] = job.Tasks[i].ID, t.State
	}
	if err := db.QueryRow(ctx, `SELECT state FROM deckhand.job WHERE id = $1`, job.ID).Scan(&job.State); err != nil {
		tb.Fatalf("catalogtest: read job %d: %v", job.ID, err)
	}
	if o.State != "" && job.State != o.State {
		tb.Fatalf("catalogtest: job %+v is %s, not %s", o, job.State, o.State)
	}
	return job
}

func insertTask(ctx context.Context, tb testing.TB, db DB, jobID int64, pause string, t TaskOpts, ids map[string]int64,
	states map[string]deckhandtype.TaskState) TaskRow {
	tb.Helper()
	row := TaskRow{JobID: jobID, Name: t.Name, State: t.State}
	if t.Kind == "" {
		t.Kind = "noop"
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = 3
	}
	if ran(t.State) && t.Attempts == 0 {
		t.Attempts = 1
	}
	if t.State == deckhandtype.TaskRunning || t.State == deckhandtype.TaskCancelling {
		row.WorkerID = t.WorkerID
		if row.WorkerID == 0 {
			row.WorkerID = Worker(ctx, tb, db, nil)
		}
	}
	pending := 0
	for _, d := range t.DependsOn {
		if _, ok := ids[d]; !ok {
			tb.Fatalf("catalogtest: task %s depends on %s, which is not listed before it", t.Name, d)
		}
		if states[d] != deckhandtype.TaskDone {
			pending++
		}
	}
	var notBefore *time.Time
	if !t.NotBefore.IsZero() {
		notBefore = &t.NotBefore
	}
	var addedBy *int64
	if t.AddedBy != "" {
		id := ids[t.AddedBy]
		addedBy = &id
	}
	var token *int64
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, max_attempts, timeout, state, pending_deps,
			attempts, runs, not_before, attempt_token, worker_id, started_at, finished_at, added_by, pause)
		VALUES (@job, @name, @kind, nullif(@node, ''), 'app', @max_attempts, '1 hour', @state, @pending,
			@attempts, @attempts, coalesce(@not_before::timestamptz, '-infinity'),
			CASE WHEN @ran THEN nextval('deckhand.attempt_token_seq') END, nullif(@worker::bigint, 0),
			CASE WHEN @ran THEN now() END,
			CASE WHEN @state IN ('done', 'failed', 'unscheduled', 'cancelled') THEN now() END, @added_by,
			CASE WHEN @state IN ('blocked', 'running', 'paused') THEN nullif(@pause, '') END)
		RETURNING id, attempt_token`,
		pgx.StrictNamedArgs{"job": jobID, "name": t.Name, "kind": t.Kind, "node": t.Node, "max_attempts": t.MaxAttempts,
			"state": t.State, "pending": pending, "attempts": t.Attempts, "not_before": notBefore, "ran": ran(t.State),
			"worker": row.WorkerID, "added_by": addedBy, "pause": pause},
	).Scan(&row.ID, &token)
	if err != nil {
		tb.Fatalf("catalogtest: insert task %s: %v", t.Name, err)
	}
	if token != nil {
		row.Token = *token
	}
	for _, d := range t.DependsOn {
		exec(ctx, tb, db, `INSERT INTO deckhand.task_dep (task_id, depends_on) VALUES ($1, $2)`, row.ID, ids[d])
		exec(ctx, tb, db, `UPDATE deckhand.task SET has_dependents = true WHERE id = $1`, ids[d])
	}
	return row
}

// AttemptOpts describes a finished attempt of a task.
type AttemptOpts struct {
	Task    TaskRow
	Attempt int                  // 1 when zero
	Outcome deckhandtype.Outcome // failed when empty
	Message string               // its error message
}

// Attempt records a finished attempt of a task under the task's attempt token.
func Attempt(ctx context.Context, tb testing.TB, db DB, opts *AttemptOpts) {
	tb.Helper()
	o := *opts
	if o.Attempt == 0 {
		o.Attempt = 1
	}
	if o.Outcome == "" {
		o.Outcome = deckhandtype.OutcomeFailed
	}
	exec(ctx, tb, db, `
		INSERT INTO deckhand.task_attempt (task_id, token, attempt, outcome, started_at, finished_at, message)
		VALUES ($1, $2, $3, $4, now(), now(), nullif($5, ''))`, o.Task.ID, o.Task.Token, o.Attempt, o.Outcome, o.Message)
}
