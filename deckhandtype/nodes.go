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

// Primaries returns the members of group that count as its primary: those the leader last
// recorded as primary. A probe that cannot reach a node keeps the role it last recorded, so
// after a failover the old primary, while it is down, still reads as primary beside the
// promoted standby; when some recorded primaries answered their latest probe and others did
// not, only those that answered count. Several that answered are a real conflict (two
// servers accepting writes), left to the caller to refuse.
func Primaries(nodes []Node, group string) (members, primaries []Node) {
	var answering []Node
	for _, n := range nodes {
		if n.Group != group {
			continue
		}
		members = append(members, n)
		if n.Role == "primary" {
			primaries = append(primaries, n)
			if n.LastError == nil {
				answering = append(answering, n)
			}
		}
	}
	if len(answering) > 0 && len(answering) < len(primaries) {
		primaries = answering
	}
	return members, primaries
}
