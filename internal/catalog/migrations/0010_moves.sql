-- Online moves (package move): two more kinds of cleanup resource, and the durable progress
-- of each move's catch-up.

-- schema_cascade: a schema dropped with everything in it (DROP SCHEMA ... CASCADE): the copy
-- of a moved schema on the target if the move fails, the source schema once it has moved.
-- function: a function (location: its schema; name: its name, taking no arguments) dropped
-- with CASCADE, which drops the triggers that call it: the source's refusal of writes, if
-- the move fails after putting it in place.
ALTER TABLE deckhand.cleanup_record DROP CONSTRAINT cleanup_record_resource_type_check;
ALTER TABLE deckhand.cleanup_record ADD CONSTRAINT cleanup_record_resource_type_check CHECK (resource_type IN
    ('table', 'index', 'schema', 'publication', 'subscription', 'replication_slot', 'object', 'prefix',
     'schema_cascade', 'function'));

-- move_progress: where each move task stands, for `job show` and for an attempt that takes
-- over from one that died. applied_lsn is the source WAL position up to which the target has
-- applied the changes (the same position is kept on the target, in the transaction that
-- applies them: this copy is for reading and may lag it).
CREATE TABLE deckhand.move_progress (
    task_id     bigint PRIMARY KEY REFERENCES deckhand.task (id) ON DELETE CASCADE,
    step        text NOT NULL,
    applied_lsn pg_lsn,
    tables      int NOT NULL DEFAULT 0,
    tables_copied int NOT NULL DEFAULT 0,
    rows_copied bigint NOT NULL DEFAULT 0,
    longest_write_block_ms int,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON deckhand.move_progress FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.move_progress TO deckhand_worker;
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.move_progress
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

-- The online move is submittable and runs on the groups' primaries, named in its payload.
INSERT INTO deckhand.task_kind VALUES ('move', false, true) ON CONFLICT (name) DO NOTHING;

-- A schema dropped with everything in it is pinned by a pin on the schema, or on any table or
-- index in it (an export reading one of the moved tables, say).
CREATE OR REPLACE FUNCTION deckhand.pinned_by(rtype text, rnode text, rlocation text, rname text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p.operation_id IS NULL THEN 'pin ' || p.id ELSE 'operation ' || p.operation_id END
           || CASE WHEN p.reason <> '' THEN ' (' || p.reason || ')' ELSE '' END
    FROM deckhand.cleanup_pin p LEFT JOIN deckhand.operation o ON o.id = p.operation_id
    WHERE (p.operation_id IS NULL OR o.state = 'running')
      AND coalesce(p.node, '') = coalesce(rnode, '')
      AND ((p.location = rlocation
            AND ((p.resource_type = rtype AND p.name = rname)
                 OR (rtype IN ('object', 'prefix') AND p.resource_type IN ('object', 'prefix')
                     AND ((rtype = 'prefix' AND starts_with(p.name, rname))
                          OR (p.resource_type = 'prefix' AND starts_with(rname, p.name))))))
           OR (rtype = 'schema_cascade'
               AND ((p.resource_type = 'schema' AND p.name = rname)
                    OR (p.resource_type IN ('table', 'index') AND p.location = rname))))
    ORDER BY p.id LIMIT 1
$$;

-- Removing a pin wakes the records it held back, schemas dropped with everything in them included.
CREATE OR REPLACE FUNCTION deckhand.unpin(pin bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    p deckhand.cleanup_pin;
BEGIN
    PERFORM deckhand.require_admin('remove pins');
    DELETE FROM deckhand.cleanup_pin WHERE id = pin RETURNING * INTO p;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('pin %s: not found', pin);
    END IF;
    UPDATE deckhand.cleanup_record SET next_attempt_at = '-infinity'
    WHERE state = 'due' AND wait_reason = 'pinned' AND coalesce(node, '') = coalesce(p.node, '')
      AND (location = p.location OR (resource_type = 'schema_cascade' AND name IN (p.location, p.name)));
    IF FOUND THEN
        PERFORM pg_notify('deckhand_cleanup', '');
    END IF;
END $$;
