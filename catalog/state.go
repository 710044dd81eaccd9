package catalog

// Task states. Every transition below is a single guarded UPDATE in this package
// (WHERE state = <expected> AND attempt_token = <token>), so a worker that lost its
// lease can never overwrite a newer outcome.
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
// blocked and runnable tasks are cancelled at once; running ones pass through
// cancelling while their backend is cancelled on the target. A task that completes
// successfully while cancelling is recorded as done: it did its work.
const (
	TaskBlocked     = "blocked"
	TaskRunnable    = "runnable"
	TaskRunning     = "running"
	TaskCancelling  = "cancelling"
	TaskDone        = "done"
	TaskFailed      = "failed"
	TaskUnscheduled = "unscheduled"
	TaskCancelled   = "cancelled"
)

// Job states are derived from task counters by the trigger deckhand.derive_job_state
// on every update of the job row; nothing sets them directly.
//
//	scheduled ──▶ running ──▶ finished
//	                 │
//	                 ├──▶ failing ──▶ failed       (a task failed; others still run)
//	                 └──▶ cancelling ──▶ cancelled (cancel requested; backends cancelled)
//
// A failed or cancelled job can be retried, which takes it back to running.
const (
	JobScheduled  = "scheduled"
	JobRunning    = "running"
	JobFinished   = "finished"
	JobFailing    = "failing"
	JobFailed     = "failed"
	JobCancelling = "cancelling"
	JobCancelled  = "cancelled"
)

// JobTerminal reports whether a job in state s will not change again on its own.
func JobTerminal(s string) bool {
	return s == JobFinished || s == JobFailed || s == JobCancelled
}

// TaskTerminal reports whether a task in state s will not run again on its own.
func TaskTerminal(s string) bool {
	return s == TaskDone || s == TaskFailed || s == TaskUnscheduled || s == TaskCancelled
}

// Outcomes of one attempt, as recorded in deckhand.task_attempt.
const (
	OutcomeDone      = "done"      // the task succeeded
	OutcomeRetry     = "retry"     // retryable error; the task runs again after a backoff
	OutcomeFailed    = "failed"    // permanent error, or the last attempt failed
	OutcomeCancelled = "cancelled" // the job was cancelled while the attempt ran
	OutcomeLost      = "lost"      // the worker's lease expired; the leader rescued the task
	OutcomeReleased  = "released"  // the worker shut down; the attempt is not charged
)

// Notification channels. Any role that may connect to the catalog's database may listen:
// payloads name no job (a job is named by its notify_key, which deckhand.jobs shows only to
// those who may see it).
const (
	ChannelRunnable = "deckhand_runnable" // new runnable tasks exist; payload: the id of the worker whose results released them, if any
	ChannelCancel   = "deckhand_cancel"   // some job's running tasks must stop: workers look for theirs; payload empty
	ChannelJob      = "deckhand_job"      // payload: "<job notify_key>:<state>" on every job state change
)
