package deckhandtype

import "time"

// Worker is a row of deckhand.workers.
type Worker struct {
	ID             int64      `json:"id" db:"id"`
	Name           string     `json:"name" db:"name"`
	Concurrency    int        `json:"concurrency" db:"concurrency"`
	StartedAt      time.Time  `json:"started_at" db:"started_at"`
	HeartbeatAt    time.Time  `json:"heartbeat_at" db:"heartbeat_at"`
	LeaseExpiresAt time.Time  `json:"lease_expires_at" db:"lease_expires_at"`
	StoppedAt      *time.Time `json:"stopped_at" db:"stopped_at"`
	Alive          bool       `json:"alive" db:"alive"`
	IsLeader       bool       `json:"is_leader" db:"is_leader"`
	RunningTasks   int64      `json:"running_tasks" db:"running_tasks"`
}
