// Package spec holds the job specification users submit: pure types, parsing and validation.
// Nothing here talks to a database; checks that need the catalog (nodes, roles) live in engine.
package spec

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"time"
)

// Task kinds known to deckhand.
const (
	KindSQL  = "sql"  // runs SQL text on a node as the task's owner
	KindNoop = "noop" // does nothing; used to measure the engine itself
)

// DefaultMaxAttempts is used when a task does not name max_attempts.
const DefaultMaxAttempts = 3

// DefaultTimeout bounds a task that names no timeout.
const DefaultTimeout = time.Hour

// Job is what `deckhand job submit` reads (JSON or YAML).
type Job struct {
	Description string `json:"description,omitempty"`
	Kind        string `json:"kind,omitempty"` // informational label of the job: sql, export, drop, ...
	// SearchPath is applied to every SQL task; when empty the submitter's session search_path is captured.
	SearchPath string `json:"search_path,omitempty"`
	// Settings are GUCs applied to every SQL task's session, e.g. {"work_mem": "64MB"}.
	Settings map[string]string `json:"settings,omitempty"`
	// Key, when set, makes the submission unique: while an unfinished job of the same
	// submitter holds the key, another submission with it is refused and told that job's id.
	Key string `json:"key,omitempty"`
	// Priority orders claims among runnable tasks on the same node, higher first, from
	// MinPriority to MaxPriority (0 when unset). Waiting counts too: each point weighs as a
	// minute of waiting, so a job never waits behind higher priorities for longer than the
	// difference in minutes.
	Priority int    `json:"priority,omitempty"`
	Tasks    []Task `json:"tasks"`
}

// Bounds of Job.Priority.
const (
	MinPriority = -100
	MaxPriority = 100
)

// Task is one unit of work inside a Job.
type Task struct {
	Name string `json:"name"`
	// Kind defaults to "sql" when SQL is set, else must be given.
	Kind string `json:"kind,omitempty"`
	Node string `json:"node,omitempty"`
	// Owner is the role the task runs as; empty means the submitter.
	Owner       string          `json:"owner,omitempty"`
	SQL         string          `json:"sql,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"` // kind-specific arguments for built-in kinds
	DependsOn   []string        `json:"depends_on,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     Duration        `json:"timeout,omitempty"`
	// Transaction defaults to true; false runs statements that refuse a transaction block
	// (VACUUM, CREATE INDEX CONCURRENTLY).
	Transaction *bool `json:"transaction,omitempty"`
}

// InTransaction reports whether the task's SQL runs inside a transaction block.
func (t Task) InTransaction() bool { return t.Transaction == nil || *t.Transaction }

// Duration is a time.Duration that reads and writes as a Go duration string ("10m", "1h30m").
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string, e.g. "10m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string ("90s", "10m", "1h30m") or a number of seconds (30, 1.5).
// null leaves d unchanged. Anything else is a *json.UnmarshalTypeError, which encoding/json
// completes with the field name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(s), Type: reflect.TypeFor[Duration]()}
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil || math.Abs(secs) > math.MaxInt64/float64(time.Second) {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// jsonKind names the kind of a JSON value the way encoding/json's type errors do.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "value"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number " + string(b)
}
