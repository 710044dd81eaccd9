package deckhandtype

import (
	"encoding/json"
	"time"
)

// FiringOutcome is what became of one due time of a schedule (deckhand.schedule_runs).
type FiringOutcome string

const (
	FiringSubmitted      FiringOutcome = "submitted"       // the job was written
	FiringSkippedOverlap FiringOutcome = "skipped_overlap" // --no-overlap and the previous job had not ended
	FiringSkippedMissed  FiringOutcome = "skipped_missed"  // --skip-missed and the due time passed while no leader ran
	FiringFailed         FiringOutcome = "failed"          // the submission was refused; Error says why
)

// Schedule is a row of deckhand.schedules: a job spec the leader submits at each due time,
// for its submitter.
type Schedule struct {
	ID           int64           `json:"id" db:"id"`
	Name         string          `json:"name" db:"name"`
	SubmittedBy  string          `json:"submitted_by" db:"submitted_by"`
	Owners       []string        `json:"owners" db:"owners"`
	Timing       string          `json:"timing" db:"timing"` // "cron EXPR TZ" or "every D"
	Cron         *string         `json:"cron" db:"cron"`
	Timezone     *string         `json:"timezone" db:"timezone"`
	EveryMS      *int64          `json:"every_ms" db:"every_ms"`
	SkipMissed   bool            `json:"skip_missed" db:"skip_missed"`
	NoOverlap    bool            `json:"no_overlap" db:"no_overlap"`
	Paused       bool            `json:"paused" db:"paused"`
	SpecSummary  string          `json:"spec_summary" db:"spec_summary"`
	NextRunAt    *time.Time      `json:"next_run_at" db:"next_run_at"` // nil while paused or not computed yet
	LastDueAt    *time.Time      `json:"last_due_at" db:"last_due_at"`
	LastOutcome  *FiringOutcome  `json:"last_outcome" db:"last_outcome"`
	LastError    *string         `json:"last_error" db:"last_error"`
	LastJobID    *int64          `json:"last_job_id" db:"last_job_id"`
	LastJobState *JobState       `json:"last_job_state" db:"last_job_state"`
	CreatedAt    time.Time       `json:"created_at" db:"created_at"`
	Spec         json.RawMessage `json:"spec" db:"spec"`
}

// Every is the schedule's interval, zero for a cron schedule.
func (s Schedule) Every() time.Duration {
	if s.EveryMS == nil {
		return 0
	}
	return time.Duration(*s.EveryMS) * time.Millisecond
}

// ScheduleRun is one firing of a schedule (deckhand.schedule_runs).
type ScheduleRun struct {
	ScheduleID int64         `json:"schedule_id" db:"schedule_id"`
	Schedule   string        `json:"schedule" db:"schedule"`
	DueAt      time.Time     `json:"due_at" db:"due_at"`
	Outcome    FiringOutcome `json:"outcome" db:"outcome"`
	// Missed counts the earlier due times that passed while no leader ran, folded into this one.
	Missed   int       `json:"missed" db:"missed"`
	JobID    *int64    `json:"job_id" db:"job_id"`
	JobState *JobState `json:"job_state" db:"job_state"`
	Error    *string   `json:"error" db:"error"`
	FiredAt  time.Time `json:"fired_at" db:"fired_at"`
}

// JobSchedule names the schedule that submitted a job, and the due time it fired for.
type JobSchedule struct {
	ID    int64      `json:"id"`
	Name  *string    `json:"name"` // nil once the schedule was removed
	DueAt *time.Time `json:"due_at"`
}
