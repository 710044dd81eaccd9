package catalog

import . "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // the state names read as the diagrams do

// This file is the home of deckhand's state machines: each is drawn, then tabled. Every
// transition is one guarded statement of this package (WHERE state = <from> and, for a task,
// attempt_token = <token>), so a worker that lost its lease can never overwrite a newer
// outcome. Each table has a row per edge and statement that takes it; the state-machine tests
// (states_*_test.go) run every statement from rows in each state and hold it to its rows.

// Task states.
//
//	                 deps done            claim             success
//	  blocked ───────────────▶ runnable ───────▶ running ───────────▶ done
//	     │                      ▲   │               │ │
//	     │ a dependency failed  │   │ cancel        │ │ retryable error, attempts left
//	     ▼                      │   ▼               │ │ (not_before = now + backoff),
//	unscheduled                 │ cancelled ◀──┐    │ │ lease expired (backend terminated
//	                            │              │    │ │ first), or released on shutdown
//	                            └──────────────┼────┘ │
//	                                           │      │ permanent error / attempts exhausted
//	                 cancel: running ─▶ cancelling    ▼
//	                        (backend cancelled)     failed ─▶ dependents: unscheduled
//
// Pause and resume (deckhand.pause, deckhand.resume):
//
//	            pause                      a paused job's task that would become runnable
//	runnable ◀──────────▶ paused ◀──────── (its last prerequisite done; retry, lost with attempts
//	            resume      │               left, or released — a pause "now" releases it) is
//	                        │ cancel        paused instead
//	                        ▼
//	                    cancelled
//
// A pause marks every task of the job that can still run (task.pause, the mode), so that the
// statements that would make it runnable make it paused instead; running tasks are not moved
// by a pause: they finish, or with "now" their workers cancel and release them, uncharged.
// Paused tasks are not in the runnable sets, so claims skip them through the same indexes.
// A running task that only waits on its job's other tasks (an export's coordinator) turns its
// own pause "wait" into "now" once none of them runs (ReleaseWhilePaused, which moves no
// state): it is then released like the others, rather than holding on until the resume.
//
// blocked and runnable tasks are cancelled at once; running ones pass through cancelling while
// their backend is cancelled on the target. A task that completes successfully while
// cancelling is recorded as done: it did its work. An export's coordinator that plans a new
// epoch cancels the parts of earlier ones the same way.
//
// Retry takes the failed, unscheduled and cancelled tasks of an ended job back to runnable,
// or to blocked while a prerequisite is not done. A failed task is never blocked (it ran, so
// its prerequisites were done); an unscheduled one always is, behind the prerequisite whose
// failure unscheduled it, which is retried too.
var TaskTransitions = []Transition[TaskState]{
	{TaskBlocked, TaskRunnable, "Complete", "its last prerequisite is done"},
	{TaskBlocked, TaskUnscheduled, "Complete", "a prerequisite failed"},
	{TaskBlocked, TaskCancelled, "CancelJob", "deckhand.cancel"},
	{TaskBlocked, TaskCancelled, "PlanExport", "a part of an earlier epoch"},
	{TaskBlocked, TaskPaused, "Complete", "its last prerequisite is done while its job is paused"},
	{TaskRunnable, TaskRunning, "Claim", ""},
	{TaskRunnable, TaskRunning, "ClaimStranded", "its node is no longer registered: taken by the leader, which fails it"},
	{TaskRunnable, TaskCancelled, "CancelJob", "deckhand.cancel"},
	{TaskRunnable, TaskCancelled, "PlanExport", "a part of an earlier epoch"},
	{TaskRunnable, TaskPaused, "PauseJob", "deckhand.pause"},
	{TaskPaused, TaskRunnable, "ResumeJob", "deckhand.resume"},
	{TaskPaused, TaskCancelled, "CancelJob", "deckhand.cancel"},
	{TaskPaused, TaskCancelled, "PlanExport", "a part of an earlier epoch"},
	{TaskRunning, TaskDone, "Complete", "done"},
	{TaskRunning, TaskRunnable, "Complete", "retry or lost with attempts left, or released"},
	{TaskRunning, TaskPaused, "Complete", "retry or lost with attempts left, or released, while its job is paused"},
	{TaskRunning, TaskFailed, "Complete", "failed, or retry or lost with no attempt left"},
	{TaskRunning, TaskCancelled, "Complete", "cancelled (superseded work)"},
	{TaskRunning, TaskCancelling, "CancelJob", "deckhand.cancel"},
	{TaskRunning, TaskCancelling, "PlanExport", "a part of an earlier epoch"},
	{TaskCancelling, TaskDone, "Complete", "done"},
	{TaskCancelling, TaskCancelled, "Complete", "any other outcome"},
	{TaskFailed, TaskRunnable, "RetryJob", "deckhand.retry"},
	{TaskUnscheduled, TaskBlocked, "RetryJob", "deckhand.retry: behind the prerequisite that failed, retried too"},
	{TaskCancelled, TaskRunnable, "RetryJob", "deckhand.retry"},
	{TaskCancelled, TaskBlocked, "RetryJob", "deckhand.retry: behind a prerequisite retried too"},
}

// isActive completes a test of a task's state that holds for running and cancelling tasks,
// written as a negation of the other states: the planner cannot then answer it with the
// partial index of active tasks (task_active_idx). A generic plan made while few tasks ran
// takes that index for nearly empty, and scanned it for every row of a batch it joined
// (a batch of 400 results compared 160,000 rows), where the primary key finds each at once.
const isActive = ` <> ALL ('{blocked,runnable,paused,done,failed,unscheduled,cancelled}')`

// Job states are derived from the job's task counters by the trigger deckhand.derive_job_state
// on every update of the job row; nothing sets them directly.
//
//	scheduled ──▶ running ──▶ finished
//	                 │
//	                 ├──▶ failing ──▶ failed       (a task failed; others still run)
//	                 └──▶ cancelling ──▶ cancelled (cancel requested; backends cancelled)
//
//	scheduled, running, failing ──pause──▶ pausing ──▶ paused   (tasks running at the pause still
//	              ▲                           │          │       run, or are released with "now")
//	              └──────────resume───────────┴──────────┘
//
// A job is pausing while tasks it had running at the pause still run (job.pause_waits_for
// counts them down), and paused once none does; a pausing job whose last tasks end finishes
// or fails. Resuming gives back the state its counters say. Cancelling a paused or pausing job
// ends the pause.
//
// A scheduled job has nothing running: cancelling it cancels it at once. A failed job that
// is retried runs again (it had started: a task failed); a cancelled one runs again, or is
// scheduled if none of its tasks ever started, or finished if every task had finished (the
// cancel came after the last one started, and it succeeded).
var JobTransitions = []Transition[JobState]{
	{JobScheduled, JobRunning, "Claim", "its first task starts"},
	{JobScheduled, JobCancelled, "CancelJob", "deckhand.cancel: nothing was running"},
	{JobRunning, JobFinished, "Complete", "its last task is done"},
	{JobRunning, JobFailing, "Complete", "a task failed, others still run"},
	{JobRunning, JobFailed, "Complete", "a task failed and nothing else runs"},
	{JobRunning, JobCancelling, "CancelJob", "deckhand.cancel"},
	{JobRunning, JobCancelled, "CancelJob", "deckhand.cancel: nothing was running"},
	{JobFailing, JobFailed, "Complete", "the last running task ended"},
	{JobFailing, JobCancelling, "CancelJob", "deckhand.cancel"},
	{JobFailing, JobCancelled, "CancelJob", "deckhand.cancel: nothing was running"},
	{JobCancelling, JobCancelled, "Complete", "the last running task ended"},
	{JobFailed, JobRunning, "RetryJob", "deckhand.retry"},
	{JobCancelled, JobRunning, "RetryJob", "deckhand.retry"},
	{JobCancelled, JobScheduled, "RetryJob", "deckhand.retry: none of its tasks ever started"},
	{JobCancelled, JobFinished, "RetryJob", "deckhand.retry: every task had finished, nothing to run again"},
	{JobScheduled, JobPaused, "PauseJob", "deckhand.pause"},
	{JobRunning, JobPausing, "PauseJob", "deckhand.pause: tasks still run"},
	{JobRunning, JobPaused, "PauseJob", "deckhand.pause: nothing was running"},
	{JobFailing, JobPausing, "PauseJob", "deckhand.pause: tasks still run"},
	{JobFailing, JobPaused, "PauseJob", "deckhand.pause: nothing was running"},
	{JobPausing, JobPaused, "Complete", "the last task it waited for stopped"},
	{JobPausing, JobFinished, "Complete", "its last task is done"},
	{JobPausing, JobFailed, "Complete", "its last task ended, and one failed"},
	{JobPausing, JobRunning, "ResumeJob", "deckhand.resume"},
	{JobPausing, JobFailing, "ResumeJob", "deckhand.resume: a task had failed"},
	{JobPaused, JobScheduled, "ResumeJob", "deckhand.resume: none of its tasks ever started"},
	{JobPaused, JobRunning, "ResumeJob", "deckhand.resume"},
	{JobPaused, JobFailing, "ResumeJob", "deckhand.resume: a task had failed"},
	{JobPausing, JobCancelling, "CancelJob", "deckhand.cancel"},
	{JobPaused, JobCancelled, "CancelJob", "deckhand.cancel: nothing was running"},
}

// Operation states. An operation is the scope cleanup records belong to: one attempt of a task,
// or a whole job. It is alive (deckhand.operation_alive) while it runs and
//   - for an attempt: the task still runs that attempt (same attempt token) and the worker's
//     lease is fresh;
//   - for a job: the job is not terminal.
//
// An operation that is not alive any more but still says running is an orphan; the cleaner
// decides it (DecideOperations): failed, except a job-wide operation whose job finished.
//
//	running ──Finish(success), while alive──▶ succeeded
//	   └─────Finish(failure) / orphaned──────▶ failed
var OperationTransitions = []Transition[OperationState]{
	{OperationRunning, OperationSucceeded, "FinishOperation", "success, while alive"},
	{OperationRunning, OperationSucceeded, "DecideOperations", "a job-wide operation whose job finished"},
	{OperationRunning, OperationFailed, "FinishOperation", "failure"},
	{OperationRunning, OperationFailed, "DecideOperations", "orphaned"},
}

// Cleanup record states, as stored (the wait reasons in_use, retrying and pinned are a due
// record's wait_reason, which deckhand.cleanup_records shows as its state).
//
//	            operation ends; policy says remove                  drop succeeded or
//	pending ─────────────────────────────────────▶ due ─────────────────────────────▶ removed
//	   │                                           │ ▲  already gone
//	   │ operation ends; policy says keep          │ │
//	   │ (on_failure after success,                │ │ in use (lock timeout, active slot), transient
//	   │  deferred_on_success after failure),      │ │ error or pinned: wait_reason set,
//	   │ or the creation found the name taken      │ │ next_attempt_at = now + backoff
//	   ▼                                           │ └─
//	forgotten ◀──── operator: cleanup forget ──────┤
//	                                               ├── permanent error, or too many transient ones ──▶ failed
//	                                               └── its node is no longer registered ─────────────▶ node_removed
//
// failed and node_removed are never retried on their own: they wait for an operator, who
// fixes the cause and runs `deckhand cleanup retry` (back to due) or `deckhand cleanup forget`,
// or for a new record of the same resource, which supersedes them (forgotten).
// Records of a running operation are only ever pending: nothing touches them. A record of a
// failed operation that a later attempt of the same task takes over (TakeOverCleanup: a move
// resuming with what a dead attempt made) becomes a pending record of that attempt's operation.
var CleanupTransitions = []Transition[CleanupState]{
	{CleanupPending, CleanupDue, "FinishOperation", "the policy says remove"},
	{CleanupPending, CleanupDue, "DecideOperations", "the policy says remove"},
	{CleanupPending, CleanupForgotten, "FinishOperation", "the policy says keep"},
	{CleanupPending, CleanupForgotten, "DecideOperations", "the policy says keep"},
	{CleanupPending, CleanupForgotten, "ForgetCleanup", "the running operation found the name taken: not its resource"},
	{CleanupPending, CleanupForgotten, "ForgetCleanupRecord", "deckhand.cleanup_forget, once the operation ended"},
	{CleanupDue, CleanupDue, "ClaimCleanup", "in use, retrying or pinned (wait_reason set, next attempt later)"},
	{CleanupDue, CleanupRemoved, "ClaimCleanup", "removed, or already gone"},
	{CleanupDue, CleanupFailed, "ClaimCleanup", "a permanent error, or too many transient ones"},
	{CleanupDue, CleanupNodeRemoved, "ClaimCleanup", "its node is no longer registered"},
	{CleanupDue, CleanupNodeRemoved, "MarkNodeRemoved", "its node is no longer registered"},
	{CleanupDue, CleanupForgotten, "ForgetCleanupRecord", "deckhand.cleanup_forget"},
	{CleanupDue, CleanupPending, "TakeOverCleanup", "a later attempt of its task keeps the resource (a resumed move)"},
	{CleanupFailed, CleanupDue, "RetryCleanupRecord", "deckhand.cleanup_retry"},
	{CleanupFailed, CleanupForgotten, "ForgetCleanupRecord", "deckhand.cleanup_forget"},
	{CleanupFailed, CleanupForgotten, "RegisterCleanup", "superseded by a new record of the same resource"},
	{CleanupNodeRemoved, CleanupDue, "RetryCleanupRecord", "deckhand.cleanup_retry"},
	{CleanupNodeRemoved, CleanupForgotten, "ForgetCleanupRecord", "deckhand.cleanup_forget"},
	{CleanupNodeRemoved, CleanupForgotten, "RegisterCleanup", "superseded by a new record of the same resource"},
}

// Export states, as stored (deckhand.exports also shows failed and cancelled, which follow the
// export's job: a coordinator that dies cannot be trusted to record them).
//
//	           coordinator holds the consistency point,            manifest written
//	planning ─────────────── parts added ──────────────▶ running ─────────────────▶ committed
//	                                                      │   ▲                         │ a forced export to the
//	                                                      └───┘                         ▼ same destination commits
//	                          coordinator lost; its next attempt plans again:      superseded
//	                          a new consistency point, epoch + 1
//
// A committed export is never planned again: a coordinator whose earlier attempt committed
// and was lost before its task could say so finds it committed (ErrExportCommitted).
var ExportTransitions = []Transition[ExportState]{
	{ExportPlanning, ExportRunning, "PlanExport", ""},
	{ExportRunning, ExportRunning, "PlanExport", "a new consistency point (epoch + 1)"},
	{ExportRunning, ExportCommitted, "CommitExport", ""},
	{ExportCommitted, ExportSuperseded, "CommitExport", "of a forced export to the same destination"},
}

// Schedules are active or paused (deckhand.schedule_pause, deckhand.schedule_resume); they have
// no other state. While active, each due time is handled once, by FireSchedule, which records
// a firing (deckhand.schedule_run, keyed by schedule and due time) with one outcome of
// FiringOutcome — submitted (with its job), skipped_overlap, skipped_missed or failed — and
// moves next_run_at past the due time, in one transaction guarded by next_run_at = the due
// time read: a second leader finds it moved and writes nothing.

// Transition is one edge of a state machine and a statement that takes it. An edge that
// several statements take has a row for each.
type Transition[S ~string] struct {
	From, To S
	By       string // the method of Catalog whose statement takes the edge
	Why      string // when it does; for SQL users, the deckhand function that does it
}

// Allowed reports whether the machine has an edge from → to (staying put counts as allowed).
func Allowed[S ~string](machine []Transition[S], from, to S) bool {
	if from == to {
		return true
	}
	for _, t := range machine {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}

// Notification channels. Any role that may connect to the catalog's database may listen:
// payloads name no job (a job is named by its notify_key, which deckhand.jobs shows only to
// those who may see it).
const (
	ChannelRunnable = "deckhand_runnable" // new runnable tasks exist; payload: the id of the worker whose results released them, if any
	ChannelCancel   = "deckhand_cancel"   // some job's running tasks must stop: workers look for theirs; payload empty
	ChannelJob      = "deckhand_job"      // payload: "<job notify_key>:<state>" on every job state change
	ChannelCleanup  = "deckhand_cleanup"  // cleanup records became due; payload empty
)
