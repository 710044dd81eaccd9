-- A transaction id names a transaction only within one history of its server: a standby
-- promoted in a failover shares its primary's history up to the point it had replayed, and may
-- give out again the ids the old primary gave out after it. With the attempt's transaction id
-- its worker now records what identifies that history when the id was read: the server's
-- timeline and, where the owner may read it, its system identifier. Whoever asks the node
-- about the transaction later trusts the answer only from the same timeline and system;
-- otherwise the task's effect is unknown and it fails rather than run again or be recorded
-- done. Attempts recorded before have neither (NULL) and are judged as they were.
ALTER TABLE deckhand.task ADD COLUMN xid_timeline bigint, ADD COLUMN xid_system bigint;

COMMENT ON COLUMN deckhand.task.xid_timeline IS
    'timeline of the node when attempt xid_token read attempt_xid; NULL when not recorded';
COMMENT ON COLUMN deckhand.task.xid_system IS
    'system identifier of the node when attempt xid_token read attempt_xid; NULL when not readable or not recorded';
