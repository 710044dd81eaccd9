-- The rows that admit moves (0029) were one per schema, and any submitter may write a move of
-- any schema name from psql, where nothing checks who owns it: a submitter that wrote a move
-- of a schema and kept its transaction open held that row for as long as it liked. Every
-- other submission of a move of the schema, the tenant's and an admin's included, waited for
-- it without end; so did the leader firing a schedule that moves it, and with that firing
-- every other schedule due beside it (the leader waits for all the firings it started).
--
-- The rows are now one per submitter and schema: an open transaction holds back the moves of
-- its own submitter alone. Two submitters moving one schema at the same moment are not
-- serialized here; the catalog still admits one, at the latest when the moves begin
-- (BeginMove marks under a table lock that only workers take). And every wait on a row is
-- bounded: past 2 s (as the catalog's other row-lock waits) the statement fails with a lock
-- timeout (55P03), which the leader's firing takes as "try again" rather than as a refusal.
DELETE FROM deckhand.move_admission;
ALTER TABLE deckhand.move_admission DROP CONSTRAINT move_admission_pkey,
    ADD COLUMN submitted_by text NOT NULL,
    ADD CONSTRAINT move_admission_pkey PRIMARY KEY (submitted_by, schema_name);

CREATE OR REPLACE FUNCTION deckhand.admit_moves() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    msg text;
    who text;
    first_schema text;
    schemas bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM added WHERE kind = 'move') THEN
        RETURN NULL;
    END IF;
    -- The rows in name order, so that two statements that write moves of several schemas
    -- never wait for each other in a cycle.
    BEGIN
        INSERT INTO deckhand.move_admission AS a (submitted_by, schema_name, job_id)
        SELECT DISTINCT ON (j.submitted_by, o.schema_name) j.submitted_by, o.schema_name, n.job_id
        FROM added n JOIN deckhand.job j ON j.id = n.job_id
        CROSS JOIN LATERAL deckhand.move_objects(n.payload) o
        WHERE n.kind = 'move'
        ORDER BY j.submitted_by, o.schema_name
        ON CONFLICT ON CONSTRAINT move_admission_pkey DO UPDATE SET job_id = excluded.job_id;
    EXCEPTION WHEN lock_not_available THEN
        SELECT min(j.submitted_by), min(o.schema_name), count(DISTINCT o.schema_name)
          INTO who, first_schema, schemas
          FROM added n JOIN deckhand.job j ON j.id = n.job_id
          CROSS JOIN LATERAL deckhand.move_objects(n.payload) o
         WHERE n.kind = 'move';
        RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
            MESSAGE = format('a move of %s is being written by another transaction of %s that has not ended; try again once it has',
                             CASE WHEN schemas = 1 THEN 'schema ' || first_schema
                                  ELSE format('schema %s (or of one of %s other schemas)', first_schema, schemas - 1) END,
                             who);
    END;
    -- A statement of its own, so that its snapshot is taken once the rows are locked.
    SELECT format('task "%s": %s is already being moved by job %s',
                  replace(replace(n.name, E'\\', E'\\\\'), '"', E'\\"'),
                  CASE WHEN o.table_name IS NULL THEN 'schema ' || o.schema_name
                       ELSE 'table ' || o.schema_name || '.' || o.table_name END,
                  m.moving_job_id)
      INTO msg
      FROM added n
      CROSS JOIN LATERAL deckhand.move_objects(n.payload) WITH ORDINALITY AS o(schema_name, table_name, ord)
      JOIN deckhand.live_moves() m ON m.schema_name = o.schema_name
           AND (o.table_name IS NULL OR m.table_name IS NULL OR m.table_name = o.table_name)
           AND m.moving_job_id <> n.job_id
     WHERE n.kind = 'move'
     ORDER BY n.id, o.ord, m.schema_name, m.table_name NULLS FIRST, m.moving_job_id
     LIMIT 1;
    IF msg IS NOT NULL THEN
        PERFORM deckhand.input_error(msg);
    END IF;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION deckhand.admit_moves() FROM PUBLIC;
