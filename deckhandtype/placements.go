package deckhandtype

import "time"

// PlacedObject is what a placement places: a whole schema, or one table of it.
type PlacedObject struct {
	Schema string `json:"schema"`
	Table  string `json:"table,omitempty"` // "": the whole schema
}

// String names the object as users write it: the schema, or schema.table (each part quoted as
// an identifier only where it needs to be is the caller's business; this is for messages).
func (o PlacedObject) String() string {
	if o.Table == "" {
		return "schema " + o.Schema
	}
	return "table " + o.Schema + "." + o.Table
}

// Placement is where a schema or a table lives, and which move, if any, is moving it.
type Placement struct {
	Schema string    `json:"schema" db:"schema_name"`
	Table  *string   `json:"table" db:"table_name"` // nil: the whole schema
	Group  string    `json:"node_group" db:"node_group"`
	Since  time.Time `json:"since" db:"since"`
	// JobID is the move that put it there (only a move's switch places anything).
	JobID *int64 `json:"job_id" db:"job_id"`
	// MovingJobID is the job moving it now, to MovingTo; nil when no live job is.
	MovingJobID *int64  `json:"moving_job_id" db:"moving_job_id"`
	MovingTo    *string `json:"moving_to" db:"moving_to"`
	// Version grows with every change of any placement; the deckhand_placement notification
	// carries the highest one.
	Version int64 `json:"version" db:"version"`
}

// PlacementMove is a move under way of a schema or a table, whether the catalog places it yet
// or not (deckhand.placement_moves).
type PlacementMove struct {
	Schema string  `json:"schema" db:"schema_name"`
	Table  *string `json:"table" db:"table_name"` // nil: the whole schema
	JobID  int64   `json:"moving_job_id" db:"moving_job_id"`
	To     string  `json:"moving_to" db:"moving_to"`
}

// RebalanceMove is one move of a rebalance's job.
type RebalanceMove struct {
	TaskID     int64      `json:"task_id" db:"task_id"`
	Name       string     `json:"name" db:"name"`
	State      TaskState  `json:"state" db:"state"`
	Schema     string     `json:"schema" db:"schema_name"`
	From       string     `json:"from" db:"from_group"`
	To         string     `json:"to" db:"to_group"`
	Bytes      int64      `json:"bytes" db:"bytes"` // planned
	StartedAt  *time.Time `json:"started_at" db:"started_at"`
	FinishedAt *time.Time `json:"finished_at" db:"finished_at"`
	LastError  *string    `json:"last_error" db:"last_error"`
}

// MoveCount is a number of moves and the bytes they were planned to move.
type MoveCount struct {
	Moves int   `json:"moves"`
	Bytes int64 `json:"bytes"`
}

// RebalanceStatus is a rebalance's job and where its moves are.
type RebalanceStatus struct {
	JobID       int64           `json:"job_id"`
	State       JobState        `json:"state"`
	Description string          `json:"description"`
	CreatedAt   time.Time       `json:"created_at"`
	FinishedAt  *time.Time      `json:"finished_at"`
	Done        MoveCount       `json:"done"`
	Running     MoveCount       `json:"running"`
	Left        MoveCount       `json:"left"`   // not started yet: blocked, runnable or held
	Failed      MoveCount       `json:"failed"` // failed, cancelled or never to run (unscheduled)
	Moves       []RebalanceMove `json:"moves"`
}
