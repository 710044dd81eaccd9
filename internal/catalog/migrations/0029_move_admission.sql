-- One live job per moved object, decided where jobs are written. A move's submission check
-- (move.checkSubmission) read the moves under way, then the job was written in another
-- transaction; and it saw only the moves that had begun (their marks, BeginMove). Two moves
-- of one schema submitted at the same moment, or one submitted while another still waited to
-- run, were both admitted, and one of them failed when it began. Now every statement that
-- writes move tasks (deckhand.submit_job, a schedule's firing, a task adding tasks to its job)
-- admits them in its own transaction: it locks the row of each schema they move in
-- deckhand.move_admission, then refuses, with the line the submission check gives, a move of
-- an object that another job that has not ended moves or is to move (deckhand.live_moves).
-- A second submission of a schema waits on the row for the first's transaction to end, and
-- its next statement sees the first's tasks: under READ COMMITTED the second is refused; under
-- REPEATABLE READ or SERIALIZABLE, whose snapshot predates the first's commit, it fails with
-- a serialization failure (40001) instead of missing the first.

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

-- live_moves: every object that a job that has not ended moves or is to move — the marks of
-- its moves that have begun (as deckhand.placement_moves shows them), and the objects of its
-- move tasks that have not ended (waiting, running, paused). A move task that has ended holds
-- nothing: done, it switched its objects and cleared its marks; failed or cancelled, it
-- cleared them. What `deckhand move`, a job spec's move and `deckhand rebalance` leave alone;
-- every catalog role may read it, as deckhand.placement_moves.
CREATE FUNCTION deckhand.live_moves() RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
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
    FROM deckhand.task t CROSS JOIN LATERAL deckhand.move_objects(t.payload) o
    WHERE t.kind = 'move' AND t.state IN ('blocked', 'runnable', 'running', 'cancelling', 'paused')
      AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = t.job_id
                  AND j.state NOT IN ('finished', 'failed', 'cancelled'))
$$;
REVOKE ALL ON FUNCTION deckhand.live_moves() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.live_moves() TO deckhand_submitter, deckhand_worker;

-- move_admission: a row per schema that moves were ever written for, locked by each statement
-- that writes moves of it until its transaction ends; job_id is the last job admitted. A row
-- rather than an advisory lock: no role but deckhand's own functions and workers can take it,
-- and a snapshot older than the last admission fails on it rather than reading past it.
CREATE TABLE deckhand.move_admission (
    schema_name text PRIMARY KEY,
    job_id      bigint NOT NULL
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
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    msg text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM added WHERE kind = 'move') THEN
        RETURN NULL;
    END IF;
    -- The schemas' rows in name order, so that two statements that write moves of several
    -- schemas never wait for each other in a cycle.
    INSERT INTO deckhand.move_admission AS a (schema_name, job_id)
    SELECT DISTINCT ON (o.schema_name) o.schema_name, n.job_id
    FROM added n CROSS JOIN LATERAL deckhand.move_objects(n.payload) o
    WHERE n.kind = 'move'
    ORDER BY o.schema_name
    ON CONFLICT (schema_name) DO UPDATE SET job_id = excluded.job_id;
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

-- On INSERT alone: a task's kind and payload never change once it is written (task_identity).
CREATE TRIGGER task_move_admission AFTER INSERT ON deckhand.task
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION deckhand.admit_moves();
