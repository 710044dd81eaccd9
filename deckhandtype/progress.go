package deckhandtype

import (
	"fmt"
	"time"
)

// TaskProgress is how far a running task's current statement has got, as PostgreSQL reports
// it in pg_stat_progress_* (CREATE INDEX, VACUUM, ANALYZE, CLUSTER, COPY, BASE_BACKUP), sampled
// by the task's worker about every second. Total is 0 when PostgreSQL does not know it.
type TaskProgress struct {
	Command   string    `json:"command"`    // CREATE INDEX, VACUUM, ANALYZE, CLUSTER, COPY, BASE_BACKUP
	Phase     string    `json:"phase"`      // PostgreSQL's name of the phase, e.g. "building index: scanning table"
	Done      int64     `json:"done"`       // units done in this phase
	Total     int64     `json:"total"`      // units this phase has, 0 when unknown
	Unit      string    `json:"unit"`       // blocks, tuples or bytes
	SampledAt time.Time `json:"sampled_at"` // when the worker read it on the node
}

// Fraction is Done/Total, or -1 when the total is unknown.
func (p TaskProgress) Fraction() float64 {
	if p.Total <= 0 {
		return -1
	}
	return min(float64(p.Done)/float64(p.Total), 1)
}

// NamedProgress is the progress of one running task of a job.
type NamedProgress struct {
	TaskID int64  `json:"task_id"`
	Task   string `json:"task"`
	TaskProgress
}

// String reads "phase 45% (2431/5400 blocks)", or "phase 2431 tuples" when the total is unknown.
func (p TaskProgress) String() string {
	phase := p.Phase
	if phase == "" {
		phase = p.Command
	}
	if f := p.Fraction(); f >= 0 {
		return fmt.Sprintf("%s %d%% (%d/%d %s)", phase, int(f*100), p.Done, p.Total, p.Unit)
	}
	return fmt.Sprintf("%s %d %s", phase, p.Done, p.Unit)
}
