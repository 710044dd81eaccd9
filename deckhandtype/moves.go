package deckhandtype

import "time"

// MoveProgress is where a move task stands (deckhand.move_progress).
type MoveProgress struct {
	TaskID       int64   `json:"task_id" db:"task_id"`
	Step         string  `json:"step" db:"step"`
	AppliedLSN   *string `json:"applied_lsn,omitempty" db:"applied_lsn"` // source WAL position applied on the target
	Tables       int     `json:"tables" db:"tables"`
	TablesCopied int     `json:"tables_copied" db:"tables_copied"`
	RowsCopied   int64   `json:"rows_copied" db:"rows_copied"`
	// LongestWriteBlockMS is how long the cut-over held writers on the source, once it succeeded.
	LongestWriteBlockMS *int      `json:"longest_write_block_ms,omitempty" db:"longest_write_block_ms"`
	UpdatedAt           time.Time `json:"updated_at" db:"updated_at"`
}
