-- A move task that has not begun held its objects against everyone's moves (0029). But any
-- submitter may write a move of any schema name from psql, where nothing checks who owns it,
-- and keep its job from ending — paused, behind a task that waits, or on a node no worker
-- reaches: the tenant's own moves of its schema, and its rebalances, were refused for as
-- long as the other submitter liked, naming a job the tenant could neither see nor cancel.
-- (A move that begins is checked on its nodes, and one of another tenant's schema fails at
-- its first attempt and clears its marks.)
--
-- A move task that has not begun now holds its objects only against the moves of a role that
-- may act on its job (deckhand.may_act_on's rule, for that role): its submitter, a member of
-- every owner of its tasks, an admin — whoever may cancel it. The marks of moves under way
-- hold their objects against everyone, as before.

-- role_may_act_on: role who may act on a job of submitted_by whose tasks run as owners, as
-- deckhand.may_act_on says of the session's user. A role the catalog's cluster does not have
-- may act on its own jobs alone.
CREATE FUNCTION deckhand.role_may_act_on(who text, submitted_by text, owners text[]) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT submitted_by = who
        OR CASE WHEN NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = who) THEN false
                ELSE pg_has_role(who::name, 'deckhand_admin'::name, 'MEMBER')
                  OR pg_has_role(who::name, 'deckhand_worker'::name, 'MEMBER')
                  OR EXISTS (SELECT 1 FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
                             WHERE n.nspname = 'deckhand' AND r.rolname = who)
                  OR (cardinality(owners) > 0 AND NOT EXISTS (
                        SELECT 1 FROM unnest(owners) o
                        WHERE NOT CASE WHEN EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = o)
                                       THEN pg_has_role(who::name, o::name, 'MEMBER') ELSE false END))
           END
$$;
REVOKE ALL ON FUNCTION deckhand.role_may_act_on(text, text, text[]) FROM PUBLIC;

-- live_moves_for: what holds an object against role who's moves: every mark of a job that has
-- not ended, and the objects of the move tasks that have not ended of the jobs who may act on.
CREATE FUNCTION deckhand.live_moves_for(who text)
RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Through task_move_not_ended_idx whatever the statistics were when the session planned it:
-- a sequential scan of the task table reads every finished task at each move submission.
SET enable_seqscan = off AS $$
    SELECT p.schema_name, p.table_name, p.moving_job_id, p.moving_to
    FROM deckhand.placement p
    WHERE p.moving_job_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                  AND j.state NOT IN ('finished', 'failed', 'cancelled'))
    UNION ALL
    SELECT o.schema_name, o.table_name, t.job_id, coalesce(t.payload ->> 'to', '')
    FROM (SELECT t.job_id, t.payload FROM deckhand.task t
          WHERE t.kind = 'move' AND t.state IN ('blocked', 'runnable', 'running', 'cancelling', 'paused')
            AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = t.job_id
                        AND j.state NOT IN ('finished', 'failed', 'cancelled')
                        AND deckhand.role_may_act_on(who, j.submitted_by, j.owners))
          -- Decided for each task before its payload is read: another role's payloads cost
          -- this role nothing.
          OFFSET 0) t
    CROSS JOIN LATERAL deckhand.move_objects(t.payload) o
$$;
REVOKE ALL ON FUNCTION deckhand.live_moves_for(text) FROM PUBLIC;

-- live_moves: what holds an object against the caller's moves; what `deckhand move`, a job
-- spec's move and `deckhand rebalance` leave alone.
CREATE OR REPLACE FUNCTION deckhand.live_moves()
RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM deckhand.live_moves_for(session_user)
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
    ), live AS (
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
