-- node_add of a registered node keeps the group and max tasks it is not given (NULL), as they
-- are when the update is made. Before, callers that wanted to keep them (deckhand node add)
-- read the node first and wrote back what they had read: another admin's change committed in
-- between was undone. It returns whether the node is new.
DROP FUNCTION deckhand.node_add(text, text, text, int);
CREATE FUNCTION deckhand.node_add(name text, dsn text, node_group text DEFAULT NULL, max_tasks int DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    inserted boolean;
BEGIN
    PERFORM deckhand.require_admin('manage nodes');
    IF name IS NULL OR name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        PERFORM deckhand.input_error(format('node %L: name must be 1-63 letters, digits, ''_'', ''.'' or ''-''', name));
    END IF;
    IF max_tasks IS NOT NULL AND max_tasks NOT BETWEEN 1 AND 10000 THEN
        PERFORM deckhand.input_error(format('node %s: max tasks must be between 1 and 10000', name));
    END IF;
    IF btrim(coalesce(dsn, '')) = '' THEN
        PERFORM deckhand.input_error(format('node %s: conninfo is empty', name));
    END IF;
    -- The client parses conninfo fully; this refuses anything that even looks like a secret.
    IF deckhand.conninfo_has_secret(dsn) THEN
        PERFORM deckhand.input_error(format('node %s: conninfo must not contain a password; use pgpass or certificates on the workers', name));
    END IF;
    INSERT INTO deckhand.node AS n (name, dsn, node_group, max_tasks)
    VALUES (node_add.name, node_add.dsn, coalesce(nullif(node_add.node_group, ''), node_add.name), coalesce(node_add.max_tasks, 4))
    ON CONFLICT ON CONSTRAINT node_pkey DO UPDATE SET dsn = EXCLUDED.dsn,
        node_group = coalesce(nullif(node_add.node_group, ''), n.node_group),
        max_tasks = coalesce(node_add.max_tasks, n.max_tasks),
        role = 'unknown', replay_lsn = NULL, checked_at = NULL
    RETURNING n.xmax OPERATOR(pg_catalog.=) '0'::pg_catalog.xid INTO inserted;
    RETURN inserted;
END $$;
REVOKE ALL ON FUNCTION deckhand.node_add(text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.node_add(text, text, text, int) TO deckhand_submitter;
