package deckhandtype

import (
	"encoding/json"
	"time"
)

// ClaimedTask is a task a worker now owns for one attempt, identified by Token.
type ClaimedTask struct {
	ID            int64             `db:"id"`
	JobID         int64             `db:"job_id"`
	Name          string            `db:"name"`
	Kind          string            `db:"kind"`
	Node          *string           `db:"node"`
	NodeDSN       *string           `db:"node_dsn"`
	Owner         string            `db:"owner"`
	SQL           string            `db:"sql"`
	Payload       json.RawMessage   `db:"payload"`
	InTransaction bool              `db:"in_transaction"`
	TimeoutMS     int64             `db:"timeout_ms"`
	Attempts      int               `db:"attempts"` // charged attempts, this one included
	MaxAttempts   int               `db:"max_attempts"`
	Run           int               `db:"runs"` // 1-based run number of this attempt
	Token         int64             `db:"attempt_token"`
	StartedAt     time.Time         `db:"started_at"`
	SearchPath    string            `db:"search_path"`
	Settings      map[string]string `db:"settings"`
	SubmittedBy   string            `db:"submitted_by"`
	// HasDependents says whether other tasks wait on this one: finishing it may release them.
	HasDependents bool `db:"has_dependents"`
	// Queued says the task was claimed ahead of a free slot on its node: it may start only in
	// the slot of one of its worker's tasks there once that one ends (catalog.Ahead).
	Queued bool `db:"queued"`
}

// Timeout is how long the task may run.
func (t *ClaimedTask) Timeout() time.Duration { return time.Duration(t.TimeoutMS) * time.Millisecond }
