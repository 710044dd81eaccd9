/*
Package cleanup makes sure that what deckhand's operations create is removed safely, whatever
fails and whichever process dies: Citus' deferred drop and shard cleaner, with a Go API for
task kinds, a cleaner that runs on the leader, and pins.

# Model

An Operation is the scope of cleanup records: one attempt of a task (Cleaner.Begin) or a whole
job (Cleaner.BeginJob). Before creating a resource — a table, index, schema (dropped without
CASCADE, or with it: SchemaCascade), function, publication, subscription, replication slot,
object-store object or prefix — the operation registers it
with a Policy, in a transaction of its own that commits before the resource exists:

	OnFailure          removed if the operation fails; forgotten (in the operation's final
	                   catalog transaction) when it succeeds
	Always             removed when the operation ends, either way
	DeferredOnSuccess  removed after success, once nothing uses it; forgotten on failure

So a crash at any point leaves, at worst, a record whose resource does not exist, which the
cleaner counts as removed. Succeed is the operation's final catalog transaction and its commit
point: it is refused once the operation is no longer alive (its attempt was taken over, its
worker's lease expired), so a worker that lost its lease cannot act as if it had succeeded.

An operation nobody finishes — its worker was killed, its attempt returned an error, its job was
cancelled — is an orphan once it is no longer alive; the cleaner ends it as failed (a job-wide
operation whose job finished, as succeeded) and applies the policies.

Records move through the states drawn and tabled in internal/catalog/state.go (the constants
are package deckhandtype's):

	pending ─▶ due ─▶ removed        (or forgotten, by policy; failed or node_removed, for an operator)

# The cleaner

Cleaner is an engine.Service that runs on the leader. It wakes when a job ends (channel
deckhand_job, payload "<job notify_key>:<state>") or an operation finishes (channel deckhand_cleanup),
heard through the process's notifier, when that notifier reconnects, and on a timer as a
fallback. As an engine.Retainer it deletes operations that ended long ago. Each pass decides orphans, then removes due records:

  - in dependency order within an operation: subscriptions, objects and prefixes, then
    publications and slots, indexes, tables, then schemas and functions;
  - as the operation's owner, connected as that role (never with more rights);
  - each statement in its own transaction under a short lock_timeout (100ms by default, the
    catalog setting cleanup_lock_timeout), so that no other session ever queues behind its lock
    request for longer; a table that pg_locks shows in use is not even asked for;
  - a resource in use (lock timeout, active slot) waits: the cleaner probes it every
    ProbeInterval (pg_locks, pg_replication_slots) and removes it as soon as it is free;
  - "already gone" counts as removed; transient errors are retried with backoff up to
    MaxErrors, then the record fails; permanent errors (permission denied) fail it at once;
  - a record whose node was removed becomes node_removed and is reported, never retried;
  - a pinned resource is never removed; its record waits until the pin goes.

Every record is row-locked in an open catalog transaction while it is being removed, so any
number of cleaners — the leader's, `deckhand cleanup run`, an operation removing its own
records with RemoveDue — can run at once, and one that dies frees the record at once.

# Writing a task kind

	op, err := cleaner.Begin(ctx, task, "rebuild orders")
	if err != nil { return err }
	defer func() { if !op.Ended() { op.Fail(context.WithoutCancel(ctx), err) } }()
	name := fmt.Sprintf("orders_new_%d", op.ID())            // a name that is the operation's own
	if _, err := op.Register(ctx, cleanup.Table(node, "public", name), cleanup.OnFailure); err != nil { return err }
	// ... CREATE TABLE, copy, swap ...
	if _, err := op.Register(ctx, cleanup.Table(node, "public", "orders_old"), cleanup.DeferredOnSuccess); err != nil { return err }
	return op.Succeed(ctx)                                      // the commit point

Package move (kind move) is a complete example: a schema moved to another node group online,
each step registering what it creates first, with every policy in use.
*/
package cleanup
