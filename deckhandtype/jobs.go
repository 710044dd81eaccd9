package deckhandtype

import "time"

// Job is a row of deckhand.jobs.
type Job struct {
	ID                int64      `json:"id" db:"id"`
	Description       string     `json:"description" db:"description"`
	Kind              string     `json:"kind" db:"kind"`
	SubmittedBy       string     `json:"submitted_by" db:"submitted_by"`
	State             JobState   `json:"state" db:"state"`
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
	// Key, when set, is held by this job while it has not ended: its submitter cannot submit
	// another job with the same key meanwhile.
	Key *string `json:"key" db:"key"`
	// PausedAt is when the job was paused, while it is pausing or paused.
	PausedAt *time.Time `json:"paused_at" db:"paused_at"`
	// Priority orders the job's tasks' claims among other jobs' on the same nodes, higher
	// first; each point weighs as a minute of waiting.
	Priority int `json:"priority" db:"priority"`
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
	State         TaskState  `json:"state" db:"state"`
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
	Outcome    Outcome    `json:"outcome" db:"outcome"`
	StartedAt  time.Time  `json:"started_at" db:"started_at"`
	FinishedAt *time.Time `json:"finished_at" db:"finished_at"`
	SQLState   *string    `json:"sqlstate,omitempty" db:"sqlstate"`
	Message    *string    `json:"message,omitempty" db:"message"`
	Detail     *string    `json:"detail,omitempty" db:"detail"`
	Hint       *string    `json:"hint,omitempty" db:"hint"`
}

// TaskPage selects a page of a job's tasks, in id (dependency) order: those with an id above
// After (0 for the first page), at most Limit of them (0 for all).
type TaskPage struct {
	After int64
	Limit int
}

// JobFilter selects jobs for listing, newest first.
type JobFilter struct {
	State    JobState // empty for all
	BeforeID int64    // page: only jobs with id < BeforeID; 0 for the first page
	Limit    int      // 0 means 50
}
