package cleanup

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// Policy says when a registered resource is removed.
type Policy = deckhandtype.Policy

// The three policies of Citus' deferred drop.
const (
	// OnFailure: removed if the operation fails; forgotten when it succeeds (in the operation's
	// final catalog transaction). For what the operation creates and keeps.
	OnFailure Policy = deckhandtype.PolicyOnFailure
	// Always: removed when the operation ends, either way. For scaffolding: replication
	// slots, publications, subscriptions, temporary tables.
	Always Policy = deckhandtype.PolicyAlways
	// DeferredOnSuccess: removed after the operation succeeds, once nothing uses it;
	// forgotten if it fails. For what the operation replaces (the old copy of a moved table).
	DeferredOnSuccess Policy = deckhandtype.PolicyDeferredOnSuccess
)

func validPolicy(p Policy) bool {
	return p == OnFailure || p == Always || p == DeferredOnSuccess
}

// Resource identifies something an operation creates or replaces. Build one with Table,
// Index, Schema, Publication, Subscription, ReplicationSlot, Object or Prefix.
type Resource = deckhandtype.CleanupResource

// Table is a table of a node, identified by schema and name as stored (not quoted).
func Table(node, schema, name string) Resource {
	return Resource{Type: deckhandtype.ResourceTable, Node: node, Location: schema, Name: name}
}

// Index is an index of a node.
func Index(node, schema, name string) Resource {
	return Resource{Type: deckhandtype.ResourceIndex, Node: node, Location: schema, Name: name}
}

// Schema is a schema of a node; it is dropped without CASCADE, after the operation's tables.
func Schema(node, name string) Resource {
	return Resource{Type: deckhandtype.ResourceSchema, Node: node, Name: name}
}

// SchemaCascade is a schema on a node that is removed with everything in it (DROP SCHEMA
// CASCADE): only for a schema that is the operation's whole (a moved schema). Its removal is
// refused while objects of other schemas depend on it.
func SchemaCascade(node, name string) Resource {
	return Resource{Type: deckhandtype.ResourceSchemaCascade, Node: node, Name: name}
}

// Function is a function taking no arguments, removed with the triggers that call it.
func Function(node, schema, name string) Resource {
	return Resource{Type: deckhandtype.ResourceFunction, Node: node, Location: schema, Name: name}
}

// Publication is a publication of a node.
func Publication(node, name string) Resource {
	return Resource{Type: deckhandtype.ResourcePublication, Node: node, Name: name}
}

// Subscription is a subscription of a node. It is removed by disabling it, detaching its slot
// (slot_name = NONE) and dropping it, so removing it never needs the publisher; register the
// slot on the publisher separately.
func Subscription(node, name string) Resource {
	return Resource{Type: deckhandtype.ResourceSubscription, Node: node, Name: name}
}

// ReplicationSlot is a replication slot of a node's server. It is skipped while active.
func ReplicationSlot(node, name string) Resource {
	return Resource{Type: deckhandtype.ResourceReplicationSlot, Node: node, Name: name}
}

// Object is one object in a bucket, addressed by gocloud.dev/blob URL (file:///dir, s3://bucket?region=...).
func Object(bucketURL, key string) Resource {
	return Resource{Type: deckhandtype.ResourceObject, Location: bucketURL, Name: key}
}

// Prefix is every object whose key starts with prefix in a bucket; removing it deletes them all.
func Prefix(bucketURL, prefix string) Resource {
	return Resource{Type: deckhandtype.ResourcePrefix, Location: bucketURL, Name: prefix}
}

// validate checks a resource before it is recorded: a record that can never be removed, or
// that would remove too much (an empty prefix: the whole bucket), is refused.
func validate(r Resource) error {
	if r.Name == "" || strings.ContainsRune(r.Name, 0) || strings.ContainsRune(r.Location, 0) {
		return fmt.Errorf("cleanup: %s: name is empty or contains a NUL byte", r.Type)
	}
	switch r.Type {
	case deckhandtype.ResourceTable, deckhandtype.ResourceIndex, deckhandtype.ResourceFunction:
		if r.Location == "" {
			return fmt.Errorf("cleanup: %s %q: schema is required", r.Type, r.Name)
		}
		fallthrough
	case deckhandtype.ResourceSchema, deckhandtype.ResourcePublication, deckhandtype.ResourceSubscription, deckhandtype.ResourceReplicationSlot,
		deckhandtype.ResourceSchemaCascade:
		if r.Node == "" {
			return fmt.Errorf("cleanup: %s %q: node is required", r.Type, r.Name)
		}
		if r.Location != "" && r.Type != deckhandtype.ResourceTable && r.Type != deckhandtype.ResourceIndex && r.Type != deckhandtype.ResourceFunction {
			return fmt.Errorf("cleanup: %s %q: takes no schema", r.Type, r.Name)
		}
	case deckhandtype.ResourceObject, deckhandtype.ResourcePrefix:
		if r.Node != "" {
			return fmt.Errorf("cleanup: %s %q: object storage has no node", r.Type, r.Name)
		}
		if err := checkBucketURL(r.Location); err != nil {
			return err
		}
	default:
		return fmt.Errorf("cleanup: unknown resource type %q", r.Type)
	}
	return nil
}

// checkBucketURL refuses URLs that are not URLs or that carry a secret, which would end up in
// the catalog and in logs.
func checkBucketURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return errors.New("cleanup: bucket must be a URL such as file:///dir or s3://bucket")
	}
	if _, has := u.User.Password(); has {
		return errors.New("cleanup: bucket URL must not contain a password")
	}
	for k := range u.Query() {
		if k := strings.ToLower(k); strings.Contains(k, "secret") || strings.Contains(k, "password") || strings.Contains(k, "token") {
			return errors.New("cleanup: bucket URL must not contain credentials; use the workers' environment")
		}
	}
	return nil
}
