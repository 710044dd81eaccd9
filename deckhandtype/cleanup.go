package deckhandtype

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// OperationState is where a cleanup operation (one attempt of a task, or a whole job) is:
// running, then succeeded or failed.
type OperationState string

const (
	OperationRunning   OperationState = "running"
	OperationSucceeded OperationState = "succeeded"
	OperationFailed    OperationState = "failed"
)

// Policy says when a registered resource is removed (Citus' three policies).
type Policy string

const (
	PolicyOnFailure         Policy = "on_failure"          // removed if the operation fails; forgotten on success
	PolicyAlways            Policy = "always"              // removed when the operation ends, either way
	PolicyDeferredOnSuccess Policy = "deferred_on_success" // removed after success, once nothing uses it; forgotten on failure
)

// ResourceType is the kind of resource a cleanup record or pin names.
type ResourceType string

const (
	ResourceTable           ResourceType = "table"
	ResourceIndex           ResourceType = "index"
	ResourceSchema          ResourceType = "schema"
	ResourcePublication     ResourceType = "publication"
	ResourceSubscription    ResourceType = "subscription"
	ResourceReplicationSlot ResourceType = "replication_slot"
	ResourceObject          ResourceType = "object"
	ResourcePrefix          ResourceType = "prefix"
	// ResourceSchemaCascade is a schema dropped with everything in it: a moved schema.
	ResourceSchemaCascade ResourceType = "schema_cascade"
	// ResourceFunction is a function taking no arguments, dropped with the triggers that call it.
	ResourceFunction ResourceType = "function"
)

// ResourceTypes lists every resource type.
var ResourceTypes = []ResourceType{ResourceTable, ResourceIndex, ResourceSchema, ResourcePublication,
	ResourceSubscription, ResourceReplicationSlot, ResourceObject, ResourcePrefix, ResourceSchemaCascade, ResourceFunction}

// CleanupState is where a cleanup record is: pending while its operation runs, then due
// (to be removed) or forgotten (kept), then removed, failed or node_removed.
type CleanupState string

const (
	CleanupPending     CleanupState = "pending"
	CleanupDue         CleanupState = "due"
	CleanupRemoved     CleanupState = "removed"
	CleanupForgotten   CleanupState = "forgotten"
	CleanupFailed      CleanupState = "failed"
	CleanupNodeRemoved CleanupState = "node_removed"
	// Why a due record waits; deckhand.cleanup_records shows the reason as its state.
	CleanupInUse    CleanupState = "in_use"   // a query or a walsender holds the resource
	CleanupRetrying CleanupState = "retrying" // a transient error; tried again after a backoff
	CleanupPinned   CleanupState = "pinned"   // a pin keeps it alive
)

// CleanupStates lists the states deckhand.cleanup_records shows, wait reasons included.
var CleanupStates = []CleanupState{CleanupPending, CleanupDue, CleanupInUse, CleanupRetrying, CleanupPinned,
	CleanupRemoved, CleanupForgotten, CleanupFailed, CleanupNodeRemoved}

// CleanupResource identifies a resource. Location is the schema of a table or index and the
// bucket URL of an object or prefix; Node is empty for object storage.
type CleanupResource struct {
	Type     ResourceType `json:"type"`
	Node     string       `json:"node,omitempty"`
	Location string       `json:"location,omitempty"`
	Name     string       `json:"name"`
}

// Display is the resource as people write it: schema.name, bucket/key, or the bare name.
func (r CleanupResource) Display() string {
	s := r.Name
	switch {
	case r.Type == ResourceObject || r.Type == ResourcePrefix:
		s = r.Location + " " + r.Name
	case r.Location != "":
		s = pgx.Identifier{r.Location, r.Name}.Sanitize()
	default:
		s = pgx.Identifier{r.Name}.Sanitize()
	}
	if r.Node != "" {
		s += " on " + r.Node
	}
	return s
}

// CleanupRecord is a row of deckhand.cleanup_records.
type CleanupRecord struct {
	ID             int64          `json:"id" db:"id"`
	OperationID    int64          `json:"operation_id" db:"operation_id"`
	JobID          int64          `json:"job_id" db:"job_id"`
	TaskID         *int64         `json:"task_id" db:"task_id"`
	Owner          string         `json:"owner" db:"owner"`
	OperationState OperationState `json:"operation_state" db:"operation_state"`
	Type           ResourceType   `json:"resource_type" db:"resource_type"`
	Node           *string        `json:"node" db:"node"`
	Location       string         `json:"location" db:"location"`
	Name           string         `json:"name" db:"name"`
	Policy         Policy         `json:"policy" db:"policy"`
	State          CleanupState   `json:"state" db:"state"`
	Attempts       int            `json:"attempts" db:"attempts"`
	Errors         int            `json:"errors" db:"errors"`
	LastError      *string        `json:"last_error" db:"last_error"`
	NextAttemptAt  *time.Time     `json:"next_attempt_at" db:"next_attempt_at"`
	CreatedAt      time.Time      `json:"created_at" db:"created_at"`
	DueAt          *time.Time     `json:"due_at" db:"due_at"`
	EndedAt        *time.Time     `json:"ended_at" db:"ended_at"`
}

// Resource is the record's resource.
func (r *CleanupRecord) Resource() CleanupResource {
	res := CleanupResource{Type: r.Type, Location: r.Location, Name: r.Name}
	if r.Node != nil {
		res.Node = *r.Node
	}
	return res
}

// Pin is a row of deckhand.cleanup_pins.
type Pin struct {
	ID          int64        `json:"id" db:"id"`
	Type        ResourceType `json:"resource_type" db:"resource_type"`
	Node        *string      `json:"node" db:"node"`
	Location    string       `json:"location" db:"location"`
	Name        string       `json:"name" db:"name"`
	OperationID *int64       `json:"operation_id" db:"operation_id"`
	JobID       *int64       `json:"job_id" db:"job_id"`
	Reason      string       `json:"reason" db:"reason"`
	CreatedBy   string       `json:"created_by" db:"created_by"`
	CreatedAt   time.Time    `json:"created_at" db:"created_at"`
	InForce     bool         `json:"in_force" db:"in_force"`
}

// CleanupFilter selects records for listing, newest first.
type CleanupFilter struct {
	State       CleanupState // as shown by the view (node_removed, in_use, ...); empty for all
	OperationID int64
	JobID       int64
	Limit       int // 0 means 500
}
