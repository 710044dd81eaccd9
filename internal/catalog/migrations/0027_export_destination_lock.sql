-- Advisory locks need no privilege: any role that may connect to the catalog's database may
-- take any key and keep it. deckhand.submit_export serialized the submissions to one
-- destination on an advisory lock whose key (hashtext of the destination) anyone could
-- compute, so that a role with no deckhand role at all held back every export to a
-- destination, an admin's included, for as long as it liked. The submissions now serialize
-- on the destination's row here, which only deckhand's functions and workers may lock, and
-- wait for it at most 2 s (as the catalog's other row-lock waits): a submitter that kept its
-- submission's transaction open holds no one else back longer. Everything else is as in
-- 0005_export_security.sql.
CREATE TABLE deckhand.export_destination (
    destination text PRIMARY KEY
);
COMMENT ON TABLE deckhand.export_destination IS
    'one row per destination ever exported to: submissions to a destination lock its row';
REVOKE ALL ON deckhand.export_destination FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.export_destination TO deckhand_worker;
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.export_destination
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

CREATE OR REPLACE FUNCTION deckhand.submit_export(
    source_table text,
    partition text,
    node_group text,
    primary_node text,
    owner text,
    destination text,
    compression text DEFAULT 'zstd',
    part_size bigint DEFAULT 134217728,
    force boolean DEFAULT false,
    max_attempts int DEFAULT 5,
    timeout interval DEFAULT '24 hours',
    OUT export_id bigint,
    OUT job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    who text := coalesce(nullif(submit_export.owner, ''), session_user);
    problem text;
    prefixes text;
    other bigint;
BEGIN
    IF coalesce(submit_export.source_table, '') = '' OR length(submit_export.source_table) > 256
       OR coalesce(submit_export.partition, '') = '' OR length(submit_export.partition) > 256
       OR submit_export.source_table ~ '[[:cntrl:]]' OR submit_export.partition ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'deckhand: export: the table and the partition are names of at most 256 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(who) > 63 THEN
        RAISE EXCEPTION 'deckhand: export: owner is not a role name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = submit_export.primary_node
                   AND n.node_group = submit_export.node_group AND n.role <> 'standby') THEN
        RAISE EXCEPTION 'deckhand: export: node % is not a primary of node group %',
            submit_export.primary_node, submit_export.node_group USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF submit_export.compression IS NULL OR submit_export.compression NOT IN ('zstd', 'snappy', 'none') THEN
        RAISE EXCEPTION 'deckhand: export: compression is zstd, snappy or none' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(submit_export.part_size, 0) < 8192 THEN
        RAISE EXCEPTION 'deckhand: export: part_size must be at least 8192 bytes' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(submit_export.max_attempts, 0) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'deckhand: export: max_attempts must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(submit_export.timeout, '0'::interval) <= '0'::interval THEN
        RAISE EXCEPTION 'deckhand: export: timeout must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    problem := deckhand.export_destination_problem(submit_export.destination);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'deckhand: export: the destination is not in normal form: %', problem
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'deckhand export normalizes destinations; see docs/operations.md';
    END IF;
    IF NOT deckhand.is_admin() THEN
        SELECT s.value INTO prefixes FROM deckhand.setting s WHERE s.name = 'export_destinations';
        IF coalesce(btrim(prefixes), '') = '' THEN
            RAISE EXCEPTION 'deckhand: export: the setting export_destinations is empty, so only admins may export; an admin lists the destination prefixes submitters may use there'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NOT deckhand.export_destination_permitted(submit_export.destination, prefixes) THEN
            RAISE EXCEPTION 'deckhand: export: destination % is not under any prefix of the setting export_destinations',
                submit_export.destination USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;

    -- One submission per destination at a time, so two cannot both pass the check below: the
    -- destination's row is locked (made first if need be; a concurrent first insert waits).
    BEGIN
        INSERT INTO deckhand.export_destination AS d (destination) VALUES (submit_export.destination)
        ON CONFLICT ON CONSTRAINT export_destination_pkey DO UPDATE SET destination = d.destination;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'deckhand: export: another submission to destination % is in a transaction that has not ended; try again once it has',
            submit_export.destination USING ERRCODE = 'lock_not_available';
    END;
    IF NOT submit_export.force THEN
        -- The tables, not the view: what a submitter may see must not hide a conflict.
        SELECT e.id INTO other
        FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
        WHERE e.destination = submit_export.destination
          AND (e.state = 'committed'
               OR (e.state IN ('planning', 'running')
                   AND j.state NOT IN ('failed', 'failing', 'cancelled', 'cancelling')))
        ORDER BY e.id DESC LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'deckhand: export: destination % already has export % (use --force to export again)',
                submit_export.destination, other USING ERRCODE = 'duplicate_object';
        END IF;
    END IF;

    INSERT INTO deckhand.job (description, kind, owners, tasks_total)
    VALUES (deckhand.redact(format('export %s to %s', submit_export.partition, submit_export.destination)),
            'export', ARRAY[who], 1)
    RETURNING id INTO submit_export.job_id;
    INSERT INTO deckhand.task (job_id, name, kind, node, owner, in_transaction, max_attempts, timeout, state)
    VALUES (submit_export.job_id, 'coordinator', 'export', submit_export.primary_node, who, true,
            submit_export.max_attempts, submit_export.timeout, 'runnable');
    INSERT INTO deckhand.export (job_id, source_table, partition, node_group, destination, compression, part_size, forced)
    VALUES (submit_export.job_id, submit_export.source_table, submit_export.partition, submit_export.node_group,
            submit_export.destination, submit_export.compression, submit_export.part_size, submit_export.force)
    RETURNING id INTO submit_export.export_id;
    PERFORM pg_notify('deckhand_runnable', '');
END $$;
