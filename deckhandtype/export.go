package deckhandtype

import (
	"encoding/json"
	"time"
)

// ExportState is where an export is: planning → running → committed (or superseded by a
// forced export to the same destination); failed, cancelled and paused follow its job.
type ExportState string

const (
	ExportPlanning   ExportState = "planning"
	ExportRunning    ExportState = "running"
	ExportCommitted  ExportState = "committed"
	ExportSuperseded ExportState = "superseded"
	// Shown by deckhand.exports, following the export's job.
	ExportFailed    ExportState = "failed"
	ExportCancelled ExportState = "cancelled"
	// The export's job is paused: nothing of it runs and the partition is not locked.
	ExportPaused ExportState = "paused"
)

// Export is a row of deckhand.exports.
type Export struct {
	ID             int64           `json:"id" db:"id"`
	JobID          int64           `json:"job_id" db:"job_id"`
	SourceTable    string          `json:"table" db:"source_table"`
	Partition      string          `json:"partition" db:"partition"`
	Group          string          `json:"group" db:"node_group"`
	Destination    string          `json:"destination" db:"destination"`
	State          ExportState     `json:"state" db:"state"`
	PartsTotal     int             `json:"parts_total" db:"parts_total"`
	PartsDone      int             `json:"parts_done" db:"parts_done"`
	Rows           int64           `json:"rows" db:"rows"`
	Bytes          int64           `json:"bytes" db:"bytes"`
	Errors         []string        `json:"errors" db:"errors"`
	ConsistencyLSN *string         `json:"consistency_lsn" db:"consistency_lsn"`
	Epoch          int             `json:"epoch" db:"epoch"`
	Compression    string          `json:"compression" db:"compression"`
	PartSize       int64           `json:"part_size" db:"part_size"`
	Forced         bool            `json:"forced" db:"forced"`
	ManifestURL    *string         `json:"manifest_url" db:"manifest_url"`
	Error          *string         `json:"error" db:"error"`
	CreatedAt      time.Time       `json:"created_at" db:"created_at"`
	PlannedAt      *time.Time      `json:"planned_at" db:"planned_at"`
	FinishedAt     *time.Time      `json:"finished_at" db:"finished_at"`
	Columns        json.RawMessage `json:"-" db:"columns"`
}
