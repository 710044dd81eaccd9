/*
Package logicalapply keeps tables on a target server in step with a source server: it consumes
a logical replication slot (output plugin pgoutput) on the source and applies its changes on
the target, as the tables' owner (no superuser, no subscription), exactly once, and resumable
after a stop at any instant. It is the catch-up step of an online move; the caller creates the
publication and the slot, copies the rows under the slot's snapshot, and later cuts over.

# Exactly once

The target itself records what it has applied: a one-row progress table (EnsureProgressTable)
holds the end LSN of the last source transaction applied, written in the same target
transaction as that transaction's changes. Each target transaction locks the progress row
first and refuses to go on if it does not hold the position this run last wrote (another
applier got there first). A run starts from the progress row, and skips every source
transaction whose commit record lies before it, so nothing is applied twice, whatever was lost
between a target commit and the source hearing of it. Replaying is not an option: with foreign
keys on the target an insert or delete applied twice fails or cascades.

The source is told a position (standby status update: written = flushed = applied) only after
the target committed it and Config.Applied returned: the slot never advances past the target,
so nothing is skipped either.

	source slot ──pgoutput──▶ reader goroutine ──▶ apply loop ──pipelined──▶ target transaction
	                                                  │                       (changes + progress row)
	      ◀── standby status (confirmed position) ────┴── Config.Applied ◀── COMMIT

# Transactions and speed

Consecutive source transactions are applied in one target transaction while more are already
waiting (up to Config.MaxBatchChanges changes or Config.MaxBatchDelay), and the statements of a
target transaction are sent in pipelined batches of prepared statements, one per relation and
kind of change. A target transaction commits as soon as nothing more is waiting, so a quiet
source is applied at once.

When no source transaction is open, the position the source reports in its keepalives counts
as applied (everything before it has been received and committed), so Applied and WaitApplied
move on over an idle source; WaitApplied asks the source for a keepalive every few
milliseconds rather than waiting for wal_sender_timeout. To wait for everything committed on
the source, wait for pg_current_wal_insert_lsn() read after the commits (pg_current_wal_lsn()
is the write position, which asynchronous commits may lie beyond).

# Failures and resuming

Run returns when its context ends (ctx.Err()), or on the first failure:

  - a change the target refuses (a constraint, a missing table or column, no key) is an
    *ApplyError naming the relation, the change's LSN and its transaction's commit LSN,
    marked permanent (taskerr.Permanent): running again would fail again;
  - anything else — a lost connection on either side, a terminated backend, the slot still
    held by a walsender that has not exited yet, a lock timeout (Config.LockTimeout), the
    progress row moved by another applier, an error from Config.Applied — is retryable
    (taskerr.Retryable): the caller closes both connections, opens new ones, calls Use and
    Run again with max(AppliedLSN, the slot's consistent point), and the run resumes exactly
    where the target's progress row says.

The source is asked to stream from that position, so it does not send what the target has;
a transaction that it sends all the same and that the target has applied is skipped
(Stats.Skipped) rather than applied again.

# What the source and target must look like

  - The publication must be created WITH (publish_via_partition_root = true): a partitioned
    table is applied through its root on the target, which routes rows to its own partitions
    (a change of partition key moves the row).
  - Every table needs a replica identity key on the target — its primary key, or the index
    named by REPLICA IDENTITY USING INDEX — whose columns the source sends as the old key of
    updates and deletes (the default replica identity, or FULL, does). Rows are addressed by
    that key with the equality operator of the index's operator class.
  - Columns are matched by name; the target may have more (their defaults apply). Values travel
    in text form and are cast on the target to the column's type (format_type of the target's
    column), so the two sides' types need only agree on the text form.
  - Unchanged TOASTed values (not sent by the source) are left alone: an update sets only the
    columns it carries.
  - A non-superuser cannot set session_replication_role, so triggers and foreign keys of the
    target fire as for any writer. Changes are applied in the source's commit order, and
    deferrable constraints are deferred to the target commit (SET CONSTRAINTS ALL DEFERRED),
    which covers what the source's transactions did. A delete the target already made by ON
    DELETE CASCADE finds no row and counts in Stats.MissingDeletes; user triggers that write
    elsewhere should be disabled on the target during a move.
  - Sequences are not replicated by PostgreSQL: the cut-over sets them.
  - Schema changes on the source are not replicated: a relation whose columns no longer match
    fails with an ApplyError.

All identifiers are quoted; every function and operator the applier names in the owner's
session is schema-qualified with exact argument types.
*/
package logicalapply
