package catalogtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// OperationOpts describes a cleanup operation.
type OperationOpts struct {
	JobID int64 // need not exist: retention may have deleted the job
	// Task scopes the operation to the task's attempt (its token, its worker); nil: the job.
	Task  *TaskRow
	State deckhandtype.OperationState // running when empty
}

// Operation inserts an operation and returns its id.
func Operation(ctx context.Context, tb testing.TB, db DB, opts *OperationOpts) int64 {
	tb.Helper()
	o := *opts
	if o.State == "" {
		o.State = deckhandtype.OperationRunning
	}
	var task, token, worker *int64
	if o.Task != nil {
		task, token = &o.Task.ID, &o.Task.Token
		if o.Task.WorkerID != 0 {
			worker = &o.Task.WorkerID
		}
	}
	var id int64
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.operation (job_id, task_id, attempt_token, worker_id, owner, submitted_by, state, ended_at)
		VALUES (@job, @task, @token, @worker, 'app', (SELECT submitted_by FROM deckhand.job WHERE id = @job), @state,
			CASE WHEN @state <> 'running' THEN now() END)
		RETURNING id`,
		pgx.StrictNamedArgs{"job": o.JobID, "task": task, "token": token, "worker": worker, "state": o.State}).Scan(&id)
	if err != nil {
		tb.Fatalf("catalogtest: insert operation: %v", err)
	}
	return id
}

// CleanupRecordOpts describes a cleanup record.
type CleanupRecordOpts struct {
	OperationID int64
	Type        deckhandtype.ResourceType // table when empty
	Node        string                    // none when empty
	Location    string                    // public when empty
	Name        string                    // unique when empty
	Policy      deckhandtype.Policy       // always when empty
	// State is a stored state (pending when empty), or a wait reason (in_use, retrying,
	// pinned): a due record waiting for that reason.
	State         deckhandtype.CleanupState
	NextAttemptAt time.Time // zero: -infinity, ready at once
}

// CleanupRecord inserts a cleanup record and returns its id.
func CleanupRecord(ctx context.Context, tb testing.TB, db DB, opts *CleanupRecordOpts) int64 {
	tb.Helper()
	o := *opts
	if o.Type == "" {
		o.Type = deckhandtype.ResourceTable
	}
	if o.Location == "" {
		o.Location = "public"
	}
	if o.Name == "" {
		o.Name = unique("resource")
	}
	if o.Policy == "" {
		o.Policy = deckhandtype.PolicyAlways
	}
	state, wait := o.State, deckhandtype.CleanupState("")
	switch o.State {
	case "":
		state = deckhandtype.CleanupPending
	case deckhandtype.CleanupInUse, deckhandtype.CleanupRetrying, deckhandtype.CleanupPinned:
		state, wait = deckhandtype.CleanupDue, o.State
	}
	var next *time.Time
	if !o.NextAttemptAt.IsZero() {
		next = &o.NextAttemptAt
	}
	var id int64
	err := db.QueryRow(ctx, `
		INSERT INTO deckhand.cleanup_record (operation_id, resource_type, node, location, name, policy, state, wait_reason,
			next_attempt_at, due_at, ended_at)
		VALUES (@op, @type, nullif(@node, ''), @location, @name, @policy, @state, nullif(@wait, ''),
			coalesce(@next::timestamptz, '-infinity'), CASE WHEN @state <> 'pending' THEN now() END,
			CASE WHEN @state NOT IN ('pending', 'due') THEN now() END)
		RETURNING id`,
		pgx.StrictNamedArgs{"op": o.OperationID, "type": o.Type, "node": o.Node, "location": o.Location, "name": o.Name,
			"policy": o.Policy, "state": state, "wait": wait, "next": next}).Scan(&id)
	if err != nil {
		tb.Fatalf("catalogtest: insert cleanup record: %v", err)
	}
	return id
}
