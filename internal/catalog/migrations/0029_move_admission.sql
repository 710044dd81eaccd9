-- One live job per moved object, decided where jobs are written. A move's submission check
-- (move.checkSubmission) reads the moves under way and the job is written in another
-- transaction, so two moves of one schema submitted at the same moment, or one submitted
-- while another still waited to run, could both pass it. Every statement that writes move
-- tasks (deckhand.submit_job, a schedule's firing, a task adding tasks to its job) admits them
-- in its own transaction (admit_moves): it locks the submitter's row of each schema they move
-- in deckhand.move_admission, then refuses, with the line the submission check gives, a move
-- of an object that another job that has not ended moves or is to move (live_moves_for).
-- Under READ COMMITTED a second submission of a schema by the same submitter waits for the
-- first's transaction and then sees its tasks; under REPEATABLE READ or SERIALIZABLE, whose
-- snapshot predates the first's commit, it fails with a serialization failure (40001).
--
-- What a user cannot do to another through this: hold back their moves with a transaction
-- left open (the rows are per submitter, and every wait on one is bounded to 2 s); hold their
-- objects with a queued move of their schema written from psql, where nothing checks who owns
-- it (a move that has not begun holds its objects only against roles that may cancel it, and
-- only if its submitter may act as its owners: a job that may run); or make admission slow
-- (a move task names at most 1000 tables, as package move takes, each task's target is read
-- once, and the live moves once per statement). The marks of moves under way hold their
-- objects against everyone, and two moves of one object are kept apart when they begin
-- (BeginMove) whoever wrote them.

-- move_objects: what a move task's payload moves, as package move reads it: its schema
-- (table_name NULL), or else each [schema, table] of its tables, in order. A payload of
-- another shape moves nothing here; the move refuses it when it runs.
CREATE FUNCTION deckhand.move_objects(payload jsonb) RETURNS TABLE (schema_name text, table_name text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT payload ->> 'schema', NULL::text WHERE coalesce(payload ->> 'schema', '') <> ''
    UNION ALL
    SELECT e.o ->> 0, e.o ->> 1
    FROM jsonb_array_elements(CASE WHEN coalesce(payload ->> 'schema', '') = '' AND jsonb_typeof(payload -> 'tables') = 'array'
                                   THEN payload -> 'tables' END) WITH ORDINALITY AS e(o, ord)
    WHERE jsonb_typeof(e.o) = 'array' AND e.o ->> 0 IS NOT NULL AND e.o ->> 1 IS NOT NULL
$$;
REVOKE ALL ON FUNCTION deckhand.move_objects(jsonb) FROM PUBLIC;

-- The move tasks that have not ended, however many tasks the catalog keeps.
CREATE INDEX task_move_not_ended_idx ON deckhand.task (job_id)
    WHERE kind = 'move' AND state IN ('blocked', 'runnable', 'running', 'cancelling', 'paused');

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
-- not ended, and the objects of the move tasks that have not ended of the jobs who may act on
-- and whose submitter may act as their owners.
CREATE FUNCTION deckhand.live_moves_for(who text)
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
REVOKE ALL ON FUNCTION deckhand.live_moves_for(text) FROM PUBLIC;

-- live_moves: what holds an object against the caller's moves; what `deckhand move`, a job
-- spec's move and `deckhand rebalance` leave alone.
CREATE FUNCTION deckhand.live_moves()
RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM deckhand.live_moves_for(session_user)
$$;
REVOKE ALL ON FUNCTION deckhand.live_moves() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.live_moves() TO deckhand_submitter, deckhand_worker;

-- move_admission: a row per submitter and schema that moves were ever written for, locked by
-- each statement that writes that submitter's moves of it until its transaction ends; job_id
-- is the last job admitted. A row rather than an advisory lock: no role but deckhand's own
-- functions and workers can take it, and a snapshot older than the last admission fails on it
-- rather than reading past it.
CREATE TABLE deckhand.move_admission (
    submitted_by text NOT NULL,
    schema_name  text NOT NULL,
    job_id       bigint NOT NULL,
    CONSTRAINT move_admission_pkey PRIMARY KEY (submitted_by, schema_name)
);
REVOKE ALL ON deckhand.move_admission FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.move_admission TO deckhand_worker;
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.move_admission
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

-- admit_moves refuses the move tasks a statement wrote when another job that has not ended
-- moves or is to move one of their objects (that object, its schema or a table of it). The
-- message is the submission check's (move.checkNotMoving), naming the task and the object the
-- task moves: a submission refused here, having passed that check a moment before, reads as
-- one refused there. Tasks of the statement's own job never conflict: a job may move a schema
-- and then back, or on.
CREATE FUNCTION deckhand.admit_moves() RETURNS trigger
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

-- On INSERT alone: a task's kind and payload never change once it is written (task_identity).
CREATE TRIGGER task_move_admission AFTER INSERT ON deckhand.task
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION deckhand.admit_moves();
