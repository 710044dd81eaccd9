-- Exactly-once for transactional tasks. Before an attempt commits its transaction on the node,
-- its worker records the transaction's id here (attempt_xid, for the attempt xid_token); the
-- node then commits. Whoever later finds the attempt unfinished — the leader rescuing the task
-- of a dead worker — asks the node pg_xact_status(attempt_xid): committed means the task did its
-- work, and it is recorded done instead of running again. A transaction that wrote nothing has
-- no id, and nothing to protect: running it again changes nothing.
ALTER TABLE deckhand.task ADD COLUMN attempt_xid xid8, ADD COLUMN xid_token bigint;

-- What a lost attempt did is known from the node for a transactional task; otherwise it is not
-- (the attempt's message says so).
COMMENT ON COLUMN deckhand.task.attempt_xid IS
    'node transaction id of attempt xid_token, recorded before the node commits it (exactly-once recovery)';
