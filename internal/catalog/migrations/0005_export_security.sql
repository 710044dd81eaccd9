-- Exports are submitted through deckhand.submit_export, which takes the submitter from
-- session_user and decides where they may write; the exported relation is pinned by OID.
--
-- Destinations are compared in their normal form (export/destination.go): this file does not
-- normalize, it refuses anything that is not already normal, so that no spelling (a "..",
-- an escaped slash, a trailing "/", credentials, a secret in the query) can slip past the
-- prefixes submitters are held to, or alias another export's destination.

-- The leaf the export reads, resolved once by its coordinator (as the owner, on the primary)
-- and checked by OID on every member that reads a part: physical standbys share OIDs.
ALTER TABLE deckhand.export
    ADD COLUMN relation_oid oid,
    ADD COLUMN relation_schema text,
    ADD COLUMN relation_name text;

-- Export coordinators have slots of their own on their node (see the claim): runnable ones
-- are found without walking the node's other runnable tasks.
CREATE INDEX task_runnable_export_idx ON deckhand.task (node, id)
    WHERE state = 'runnable' AND node_group IS NULL AND kind = 'export';

-- export_destination_problem: why dest is not a destination in normal form, or NULL if it is.
-- Its messages never quote dest, which may hold a secret.
CREATE FUNCTION deckhand.export_destination_problem(dest text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    parts text[];
    scheme text;
    host text;
    path text;
    query text;
    pair text;
    key text;
    val text;
    prev text := '';
    s3_params text[] := ARRAY['accelerate', 'awssdk', 'disable_https', 'dualstack', 'endpoint', 'fips',
        'hostname_immutable', 'kmskeyid', 'region', 'request_checksum_calculation',
        'response_checksum_validation', 's3ForcePathStyle', 'ssetype', 'use_path_style'];
BEGIN
    IF dest IS NULL OR dest = '' OR length(dest) > 2048 THEN
        RETURN 'it is empty or longer than 2048 characters';
    END IF;
    parts := regexp_match(dest, '^([a-z0-9]+)://([^/?#]*)(/[^?#]*)?(\?[^#]*)?$');
    IF parts IS NULL THEN
        RETURN 'it is not of the form scheme://host/path';
    END IF;
    scheme := parts[1];
    host := parts[2];
    path := coalesce(parts[3], '');
    query := parts[4];

    IF scheme = 'file' THEN
        IF host <> '' OR path = '' THEN
            RETURN 'a file:// destination has no host and an absolute path other than /';
        END IF;
        IF query IS NOT NULL THEN
            RETURN 'a file:// destination takes no query parameters';
        END IF;
    ELSIF scheme = 's3' THEN
        IF host !~ '^[a-z0-9][a-z0-9._-]{0,254}$' THEN
            RETURN 'an s3:// destination names a bucket in lower case, without port or credentials';
        END IF;
    ELSE
        RETURN 'the scheme is not file or s3';
    END IF;

    -- Segments of unreserved characters or escapes; no empty, "." or ".." segment (hence no
    -- trailing slash); an escape only where net/url writes one (never for "/", "." or a letter).
    IF path !~ '^(/([A-Za-z0-9._~$&+,:;=@-]|%[0-9A-F]{2})+)*$' THEN
        RETURN 'the path has an empty segment, a trailing slash or a character that needs escaping';
    END IF;
    IF path ~ '(^|/)\.\.?(/|$)' THEN
        RETURN 'the path has a "." or ".." segment';
    END IF;
    IF path ~ '%(2[46B-F]|3[0-9ABD]|4[0-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE])' THEN
        RETURN 'the path escapes a character that needs no escaping';
    END IF;

    IF query IS NOT NULL THEN
        IF query !~ '^\?[A-Za-z0-9_]+=[^&=]*(&[A-Za-z0-9_]+=[^&=]*)*$' THEN
            RETURN 'the query is not name=value pairs';
        END IF;
        FOREACH pair IN ARRAY string_to_array(substr(query, 2), '&') LOOP
            key := split_part(pair, '=', 1);
            val := substr(pair, length(key) + 2);
            IF NOT key = ANY (s3_params) THEN
                RETURN 'a query parameter is not one an s3:// destination accepts';
            END IF;
            IF key COLLATE "C" <= prev COLLATE "C" THEN
                RETURN 'query parameters are not sorted by name, or one is repeated';
            END IF;
            prev := key;
            IF val !~ '^([A-Za-z0-9._~+-]|%[0-9A-F]{2})*$'
               OR val ~ '%(2[0DE]|3[0-9]|4[1-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE])' THEN
                RETURN 'a query value is not escaped as url.Values.Encode does';
            END IF;
            IF val ~ '%40' THEN
                RETURN 'a query value carries credentials';
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION deckhand.export_destination_problem(text) FROM PUBLIC;

-- export_destination_permitted: dest (in normal form) is under one of the prefixes of the
-- setting export_destinations: same scheme, host and query, and a path equal to the prefix's
-- or below it by whole segments. Entries not in normal form match nothing.
CREATE FUNCTION deckhand.export_destination_permitted(dest text, prefixes text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH d AS (
        SELECT m[1] AS scheme, m[2] AS host, coalesce(m[3], '') AS path, coalesce(m[4], '') AS query
        FROM regexp_match(dest, '^([a-z0-9]+)://([^/?#]*)(/[^?#]*)?(\?[^#]*)?$') AS m
    ), p AS (
        SELECT m[1] AS scheme, m[2] AS host, coalesce(m[3], '') AS path, coalesce(m[4], '') AS query
        FROM regexp_split_to_table(coalesce(prefixes, ''), ',') AS entry,
             regexp_match(btrim(entry), '^([a-z0-9]+)://([^/?#]*)(/[^?#]*)?(\?[^#]*)?$') AS m
        WHERE deckhand.export_destination_problem(btrim(entry)) IS NULL
    )
    SELECT EXISTS (
        SELECT 1 FROM d JOIN p ON p.scheme = d.scheme AND p.host = d.host AND p.query = d.query
        WHERE p.path = '' OR d.path = p.path OR left(d.path, length(p.path) + 1) = p.path || '/')
$$;
REVOKE ALL ON FUNCTION deckhand.export_destination_permitted(text, text) FROM PUBLIC;

-- submit_export writes an export: its job (kind export, submitted by session_user, owned by
-- owner), the job's coordinator task on primary_node, and the export row, in one transaction.
-- Admins may export anywhere; other submitters only under the prefixes of the setting
-- export_destinations. Unless force, a destination that already has an export (committed, or
-- under way) is refused; the coordinator also refuses one whose store holds a manifest.
-- The owner's membership is checked on the nodes themselves, at submission by the client and
-- again by the worker before anything runs.
CREATE FUNCTION deckhand.submit_export(
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
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

    -- One submission per destination at a time, so two cannot both pass the check below.
    PERFORM pg_advisory_xact_lock(hashtext('deckhand export ' || submit_export.destination));
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
REVOKE ALL ON FUNCTION deckhand.submit_export(text, text, text, text, text, text, text, bigint, boolean, int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.submit_export(text, text, text, text, text, text, text, bigint, boolean, int, interval) TO deckhand_submitter;
-- Calling it takes the schema's USAGE too (which grants no access to any table).
GRANT USAGE ON SCHEMA deckhand TO deckhand_submitter;

