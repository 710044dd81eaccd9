-- Admitting a job of many move tasks (a job may have a million tasks) read the live moves
-- again for each of its objects, and each reading asked, of every live move task, whether
-- its submitter may act on it, two SECURITY DEFINER calls per task: a job of 3000 moves kept
-- a catalog backend busy for minutes, one of tens of thousands for hours. And once written,
-- its tasks cost every other role's move submission those two calls each.
--
-- The live moves are read once per statement (MATERIALIZED), and whether a role may act on a
-- task's job is first told from the roles it is a member of, read once per reading: a task
-- of another role's that names none of them costs a comparison of arrays. Whom each task
-- holds is as in 0034_live_moves_runnable_owners.sql.
CREATE OR REPLACE FUNCTION deckhand.live_moves_for(who text)
RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Through task_move_not_ended_idx whatever the statistics were when the session planned it:
-- a sequential scan of the task table reads every finished task at each move submission.
SET enable_seqscan = off AS $$
    WITH me AS MATERIALIZED (
        -- Who acts on every job (deckhand.role_may_act_on's first cases), and the roles who
        -- is a member of; nothing for a role the catalog's cluster does not have.
        SELECT coalesce(deckhand.role_may_act_on(who, NULL, '{}'::text[]), false) AS all_jobs,
               coalesce((SELECT array_agg(r.rolname::text) FROM pg_roles r
                         WHERE EXISTS (SELECT 1 FROM pg_roles w WHERE w.rolname = who)
                           AND pg_has_role(who::name, r.oid, 'MEMBER')), '{}'::text[]) AS roles
    )
    SELECT p.schema_name, p.table_name, p.moving_job_id, p.moving_to
    FROM deckhand.placement p
    WHERE p.moving_job_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                  AND j.state NOT IN ('finished', 'failed', 'cancelled'))
    UNION ALL
    SELECT o.schema_name, o.table_name, t.job_id, t.moving_to
    -- The target once per task: read for each object, it read the whole payload again.
    FROM (SELECT t.job_id, t.payload, coalesce(t.payload ->> 'to', '') AS moving_to
          FROM deckhand.task t CROSS JOIN me
          WHERE t.kind = 'move' AND t.state IN ('blocked', 'runnable', 'running', 'cancelling', 'paused')
            AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = t.job_id
                        AND j.state NOT IN ('finished', 'failed', 'cancelled')
                        AND (j.submitted_by = who
                             -- Written out in this order so that the comparison of arrays
                             -- decides first: the call is made for the jobs who may act on.
                             OR ((me.all_jobs OR (cardinality(j.owners) > 0 AND j.owners <@ me.roles))
                                 -- The submitter asked as a role that submitted nothing:
                                 -- whether it may act on a job of these owners, so may run it.
                                 AND deckhand.role_may_act_on(j.submitted_by, NULL, j.owners))))
          -- Decided for each task before its payload is read: another role's payloads cost
          -- this role nothing.
          OFFSET 0) t
    CROSS JOIN LATERAL deckhand.move_objects(t.payload) o
$$;

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
    -- As many tables as package move takes (move.maxTables): each object of a live move is
    -- read by every move submission after it.
    SELECT format('task "%s": at most 1000 tables per move',
                  replace(replace(n.name, E'\\', E'\\\\'), '"', E'\\"'))
      INTO msg
      FROM added n
     WHERE n.kind = 'move' AND jsonb_typeof(n.payload -> 'tables') = 'array'
       AND jsonb_array_length(n.payload -> 'tables') > 1000
     ORDER BY n.id LIMIT 1;
    IF msg IS NOT NULL THEN
        PERFORM deckhand.input_error(msg);
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
    -- A statement of its own, so that its snapshot is taken once the rows are locked. What
    -- holds an object is decided for the submitter of the job that moves it.
    WITH moving AS (
        SELECT n.id, n.name, n.job_id, j.submitted_by, n.payload
        FROM added n JOIN deckhand.job j ON j.id = n.job_id
        WHERE n.kind = 'move'
    -- Read once: inlined, the plan may read them again for each object of the statement.
    ), live AS MATERIALIZED (
        SELECT s.submitted_by, m.*
        FROM (SELECT DISTINCT submitted_by FROM moving) s
        CROSS JOIN LATERAL deckhand.live_moves_for(s.submitted_by) m
    )
    SELECT format('task "%s": %s is already being moved by job %s',
                  replace(replace(n.name, E'\\', E'\\\\'), '"', E'\\"'),
                  CASE WHEN o.table_name IS NULL THEN 'schema ' || o.schema_name
                       ELSE 'table ' || o.schema_name || '.' || o.table_name END,
                  m.moving_job_id)
      INTO msg
      FROM moving n
      CROSS JOIN LATERAL deckhand.move_objects(n.payload) WITH ORDINALITY AS o(schema_name, table_name, ord)
      JOIN live m ON m.submitted_by = n.submitted_by AND m.schema_name = o.schema_name
           AND (o.table_name IS NULL OR m.table_name IS NULL OR m.table_name = o.table_name)
           AND m.moving_job_id <> n.job_id
     ORDER BY n.id, o.ord, m.schema_name, m.table_name NULLS FIRST, m.moving_job_id
     LIMIT 1;
    IF msg IS NOT NULL THEN
        PERFORM deckhand.input_error(msg);
    END IF;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION deckhand.admit_moves() FROM PUBLIC;
