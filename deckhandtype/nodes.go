package deckhandtype

import "time"

// Node is a target PostgreSQL server.
type Node struct {
	Name         string     `json:"name" db:"name"`
	DSN          string     `json:"dsn" db:"dsn"`
	Group        string     `json:"group" db:"node_group"`
	MaxTasks     int        `json:"max_tasks" db:"max_tasks"`
	Role         string     `json:"role" db:"role"`
	ReplayLSN    *string    `json:"replay_lsn" db:"replay_lsn"`
	CheckedAt    *time.Time `json:"checked_at" db:"checked_at"`
	LastError    *string    `json:"last_error" db:"last_error"`
	CreatedAt    time.Time  `json:"created_at" db:"created_at"`
	RunningTasks int64      `json:"running_tasks" db:"running_tasks"`
}
