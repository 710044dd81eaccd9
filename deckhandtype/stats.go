package deckhandtype

import "time"

// Stats is a catalog-wide snapshot for dashboards and metrics, read in one statement so
// that its figures agree with each other.
type Stats struct {
	Jobs         map[JobState]int64  `json:"jobs"`  // jobs by state; every job state is present
	Tasks        map[TaskState]int64 `json:"tasks"` // tasks by state; every task state is present
	WorkersAlive int64               `json:"workers_alive"`
	LeaderID     int64               `json:"leader_id"` // 0 when no worker holds the leader lease
	// CleanupBacklog counts cleanup records not yet resolved, by state (pending, due).
	CleanupBacklog map[CleanupState]int64 `json:"cleanup_backlog"`
	// ExportRows and ExportBytes sum what committed and running exports wrote so far.
	ExportRows  int64         `json:"export_rows"`
	ExportBytes int64         `json:"export_bytes"`
	ReadAt      time.Time     `json:"read_at"`
	Took        time.Duration `json:"-"` // how long the statement ran, for callers that cache
}
