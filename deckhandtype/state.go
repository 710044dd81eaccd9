package deckhandtype

// The states below are deckhand's vocabulary; their machines (which transitions exist and
// which statement makes each) are drawn and tabled in internal/catalog/state.go.

// TaskState is where a task is in its life: blocked → runnable → running → done, or failed,
// unscheduled (a prerequisite failed) or cancelled.
type TaskState string

const (
	TaskBlocked     TaskState = "blocked"     // waits for prerequisites
	TaskRunnable    TaskState = "runnable"    // may be claimed once its not_before has passed
	TaskRunning     TaskState = "running"     // a worker runs an attempt
	TaskCancelling  TaskState = "cancelling"  // the job was cancelled; the running backend is being cancelled
	TaskDone        TaskState = "done"        // it succeeded
	TaskFailed      TaskState = "failed"      // a permanent error, or its attempts ran out
	TaskUnscheduled TaskState = "unscheduled" // a prerequisite failed: it will not run
	TaskCancelled   TaskState = "cancelled"   // its job was cancelled before it finished
	TaskPaused      TaskState = "paused"      // its job is paused: it is not claimed until the job is resumed
)

// TaskStates lists every task state in lifecycle order.
var TaskStates = []TaskState{TaskBlocked, TaskRunnable, TaskPaused, TaskRunning, TaskCancelling, TaskDone, TaskFailed, TaskUnscheduled, TaskCancelled}

// Terminal reports whether a task in state s will not run again on its own.
func (s TaskState) Terminal() bool {
	return s == TaskDone || s == TaskFailed || s == TaskUnscheduled || s == TaskCancelled
}

// JobState is derived from the job's task counters, never set by hand.
type JobState string

const (
	JobScheduled  JobState = "scheduled"  // no task has started
	JobRunning    JobState = "running"    // tasks run, none failed
	JobFinished   JobState = "finished"   // every task done
	JobFailing    JobState = "failing"    // a task failed; others still run
	JobFailed     JobState = "failed"     // ended with a failed or unscheduled task
	JobCancelling JobState = "cancelling" // cancel requested; running tasks are being stopped
	JobCancelled  JobState = "cancelled"  // ended after a cancel
	JobPausing    JobState = "pausing"    // paused: nothing more is claimed; tasks running at the pause still run
	JobPaused     JobState = "paused"     // paused, and nothing of it runs
)

// JobStates lists every job state in lifecycle order.
var JobStates = []JobState{JobScheduled, JobRunning, JobFailing, JobPausing, JobPaused, JobCancelling, JobFinished, JobFailed, JobCancelled}

// Terminal reports whether a job in state s will not change again on its own.
func (s JobState) Terminal() bool {
	return s == JobFinished || s == JobFailed || s == JobCancelled
}

// Outcome is how one attempt of a task ended, as recorded in deckhand.task_attempt.
type Outcome string

const (
	OutcomeDone      Outcome = "done"      // the task succeeded
	OutcomeRetry     Outcome = "retry"     // retryable error; the task runs again after a backoff
	OutcomeFailed    Outcome = "failed"    // permanent error, or the last attempt failed
	OutcomeCancelled Outcome = "cancelled" // the job was cancelled while the attempt ran
	OutcomeLost      Outcome = "lost"      // the worker's lease expired; the leader rescued the task
	OutcomeReleased  Outcome = "released"  // the worker shut down; the attempt is not charged
	// An attempt still in flight shows its task's state instead: running or cancelling.
	OutcomeRunning    Outcome = "running"
	OutcomeCancelling Outcome = "cancelling"
)

// Outcomes lists the outcomes an attempt may end with.
var Outcomes = []Outcome{OutcomeDone, OutcomeRetry, OutcomeFailed, OutcomeCancelled, OutcomeLost, OutcomeReleased}
