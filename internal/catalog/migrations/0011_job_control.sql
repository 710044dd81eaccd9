-- Job control: unique keys, pause and resume, priorities.

-- A job's key makes a submission idempotent for scripts: while a job of the same submitter
-- with the same key has not ended, another submission with that key is refused, and told the
-- id of the job that holds the key. Keys are the submitter's own: two roles never share a key
-- space, so nobody can hold back another role's jobs by taking its keys first, nor learn the id
-- of a job they may not see (docs/security.md, Job keys).
ALTER TABLE deckhand.job ADD COLUMN key text;
CREATE UNIQUE INDEX job_key_idx ON deckhand.job (submitted_by, key)
    WHERE key IS NOT NULL AND state NOT IN ('finished', 'failed', 'cancelled');

-- key_problem says what is wrong with a job key, or NULL when it is acceptable (NULL is no key).
CREATE FUNCTION deckhand.key_problem(k text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN k IS NULL THEN NULL
                WHEN k = '' OR length(k) > 200 OR k ~ '[[:cntrl:]]' OR btrim(k) <> k
                    THEN 'key must be 1 to 200 characters, without control characters or surrounding spaces' END
$$;

-- key_taken refuses a submission (or a retry) whose key holder is unfinished. The refusal is a
-- unique_violation of job_key_idx whose detail is the holder's id alone, for programs. The holder
-- is a job of the same submitter; its id is told only to a caller who may see it (a retry of
-- someone else's job by a member of its owners may not see the holder).
CREATE FUNCTION deckhand.key_taken(holder deckhand.job) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT deckhand.may_act_on(holder.submitted_by, holder.owners) THEN
        RAISE EXCEPTION USING ERRCODE = 'unique_violation', CONSTRAINT = 'job_key_idx',
            MESSAGE = format('key %L is held by another unfinished job of %s', holder.key, holder.submitted_by);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'unique_violation', CONSTRAINT = 'job_key_idx', DETAIL = holder.id::text,
        MESSAGE = format('key %L is held by job %s, which is %s: a key is free again once its job has ended',
                         holder.key, holder.id, holder.state);
END $$;
REVOKE ALL ON FUNCTION deckhand.key_problem(text), deckhand.key_taken(deckhand.job) FROM PUBLIC;

-- retry runs a job again: its key must be free, or the job would hold it twice.
CREATE OR REPLACE FUNCTION deckhand.retry(job bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    current deckhand.job;
    holder deckhand.job;
    new_state text;
BEGIN
    current := deckhand.job_for_control(job, 'retry');
    IF current.state NOT IN ('failed', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('job %s is %s: only failed or cancelled jobs can be retried', job, current.state);
    END IF;
    IF current.key IS NOT NULL THEN
        SELECT * INTO holder FROM deckhand.job
         WHERE submitted_by = current.submitted_by AND key = current.key AND state NOT IN ('finished', 'failed', 'cancelled');
        IF FOUND THEN
            PERFORM deckhand.key_taken(holder);
        END IF;
    END IF;
    -- Prerequisites being reset still read as failed in this statement's snapshot, so they
    -- count as pending for their dependents, as they should.
    WITH target AS (
        SELECT id FROM deckhand.task WHERE job_id = job AND state IN ('failed', 'unscheduled', 'cancelled')
        ORDER BY id FOR UPDATE
    ), pending AS (
        SELECT target.id, (SELECT count(*) FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                           WHERE d.task_id = target.id AND p.state <> 'done') AS n
        FROM target
    )
    UPDATE deckhand.task t SET pending_deps = p.n,
        state = CASE WHEN p.n = 0 THEN 'runnable' ELSE 'blocked' END,
        attempts = 0, not_before = '-infinity', finished_at = NULL, pause = NULL,
        node = CASE WHEN t.node_group IS NOT NULL THEN NULL ELSE t.node END
    FROM pending p WHERE t.id = p.id;
    BEGIN
        UPDATE deckhand.job SET cancel_requested_at = NULL, tasks_failed = 0, tasks_cancelled = 0,
            tasks_unscheduled = 0, finished_at = NULL, pause = NULL, paused_at = NULL, pause_waits_for = 0
        WHERE id = job AND state IN ('failed', 'cancelled')
        RETURNING state INTO new_state;
    EXCEPTION WHEN unique_violation THEN
        -- A job with the same key was submitted since the check above.
        SELECT * INTO holder FROM deckhand.job
         WHERE submitted_by = current.submitted_by AND key = current.key AND state NOT IN ('finished', 'failed', 'cancelled');
        IF FOUND THEN
            PERFORM deckhand.key_taken(holder);
        END IF;
        RAISE;
    END;
    IF new_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s changed while being retried', job);
    END IF;
    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_state;
END $$;

-- Pause and resume. A paused job's tasks are not claimed: those that would be runnable are
-- 'paused' instead, which keeps them out of the runnable sets (0008_queues.sql) and so out of
-- every claim, without a filter. The job's tasks that can still run carry the pause (task.pause,
-- the job's mode), so that whatever would make one runnable makes it paused instead: a
-- prerequisite finishing, a retry or release of its attempt (Complete), tasks added to the job
-- (an export's parts). pause 'wait' lets running tasks finish; 'now' has their workers cancel
-- them and release them, uncharged. The job is pausing while tasks it had running at the pause
-- still run (pause_waits_for counts them down), then paused.
ALTER TABLE deckhand.job
    ADD COLUMN pause text CHECK (pause IN ('wait', 'now')),
    ADD COLUMN paused_at timestamptz,
    ADD COLUMN pause_waits_for int NOT NULL DEFAULT 0,
    DROP CONSTRAINT job_state_check,
    ADD CONSTRAINT job_state_check CHECK (state IN ('scheduled', 'running', 'finished', 'failing', 'failed', 'cancelling',
                                                    'cancelled', 'pausing', 'paused'));
ALTER TABLE deckhand.task
    ADD COLUMN pause text CHECK (pause IN ('wait', 'now')),
    DROP CONSTRAINT task_state_check,
    ADD CONSTRAINT task_state_check CHECK (state IN ('blocked', 'runnable', 'running', 'cancelling', 'done', 'failed',
                                                     'unscheduled', 'cancelled', 'paused'));
-- Paused tasks, few and short-lived, counted (Stats) without reading other tasks.
CREATE INDEX task_paused_idx ON deckhand.task (job_id) WHERE state = 'paused';

CREATE OR REPLACE FUNCTION deckhand.derive_job_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended int := NEW.tasks_done + NEW.tasks_failed + NEW.tasks_cancelled + NEW.tasks_unscheduled;
BEGIN
    IF ended >= NEW.tasks_total THEN
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelled'
                          WHEN NEW.tasks_failed + NEW.tasks_unscheduled > 0 THEN 'failed'
                          ELSE 'finished' END;
        NEW.finished_at := coalesce(NEW.finished_at, now());
    ELSE
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelling'
                          WHEN NEW.pause IS NOT NULL AND NEW.pause_waits_for > 0 THEN 'pausing'
                          WHEN NEW.pause IS NOT NULL THEN 'paused'
                          WHEN NEW.tasks_failed > 0 THEN 'failing'
                          WHEN NEW.started_at IS NOT NULL THEN 'running'
                          ELSE 'scheduled' END;
        NEW.finished_at := NULL;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('deckhand_job', NEW.notify_key || ':' || NEW.state);
    END IF;
    RETURN NEW;
END $$;

-- pause stops new claims of a job's tasks; now = true also has the running ones cancelled on
-- their nodes and released without charging an attempt. It returns the job's state: pausing
-- while tasks still run, else paused. Pausing a paused job again changes only its mode.
CREATE FUNCTION deckhand.pause(job bigint, now boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    mode constant text := CASE WHEN now THEN 'now' ELSE 'wait' END;
    current deckhand.job;
    running int;
    late int;
    new_state text;
BEGIN
    current := deckhand.job_for_control(job, 'pause');
    IF current.state IN ('finished', 'failed', 'cancelled', 'cancelling') THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('job %s is %s: only a job that has not ended nor is being cancelled can be paused', job, current.state);
    END IF;
    -- Every task that can still run is locked, in id order before the job row as every writer
    -- does: a completion that holds one ends first, and one that comes later finds it marked.
    PERFORM count(*) FROM (SELECT id FROM deckhand.task WHERE job_id = job AND state IN ('blocked', 'runnable', 'running', 'paused')
                           ORDER BY id FOR UPDATE) locked;
    UPDATE deckhand.task SET pause = mode, state = CASE WHEN state = 'runnable' THEN 'paused' ELSE state END
    WHERE job_id = job AND state IN ('blocked', 'runnable', 'running', 'paused') AND pause IS DISTINCT FROM mode;
    SELECT count(*) INTO running FROM deckhand.task WHERE job_id = job AND state = 'running';
    UPDATE deckhand.job SET pause = mode, paused_at = coalesce(paused_at, pg_catalog.now()), pause_waits_for = running
    WHERE id = job AND state NOT IN ('finished', 'failed', 'cancelled', 'cancelling')
    RETURNING state INTO new_state;
    IF new_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s changed while being paused', job);
    END IF;
    -- Tasks added to the job by a transaction that held the job row until the update above
    -- (catalog.insertTasks locks it before it writes) are visible now: they are paused too, and
    -- any of them already claimed is waited for.
    WITH marked AS (
        UPDATE deckhand.task SET pause = mode, state = CASE WHEN state = 'runnable' THEN 'paused' ELSE state END
        WHERE job_id = job AND state IN ('blocked', 'runnable', 'running') AND pause IS DISTINCT FROM mode
        RETURNING state
    )
    SELECT count(*) FILTER (WHERE state = 'running') INTO late FROM marked;
    IF late > 0 THEN
        UPDATE deckhand.job SET pause_waits_for = pause_waits_for + late WHERE id = job RETURNING state INTO new_state;
    END IF;
    IF now AND running + late > 0 THEN
        PERFORM pg_notify('deckhand_cancel', '');
    END IF;
    RETURN new_state;
END $$;

-- resume makes a paused (or pausing) job's tasks claimable again. It returns the job's state.
CREATE FUNCTION deckhand.resume(job bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    current deckhand.job;
    new_state text;
BEGIN
    current := deckhand.job_for_control(job, 'resume');
    IF current.pause IS NULL OR current.state IN ('finished', 'failed', 'cancelled', 'cancelling') THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('job %s is %s: only a paused or pausing job can be resumed', job, current.state);
    END IF;
    PERFORM count(*) FROM (SELECT id FROM deckhand.task WHERE job_id = job AND state IN ('blocked', 'paused', 'running')
                           ORDER BY id FOR UPDATE) locked;
    UPDATE deckhand.task SET pause = NULL, state = CASE WHEN state = 'paused' THEN 'runnable' ELSE state END
    WHERE job_id = job AND state IN ('blocked', 'paused', 'running') AND pause IS NOT NULL;
    UPDATE deckhand.job SET pause = NULL, paused_at = NULL, pause_waits_for = 0
    WHERE id = job AND pause IS NOT NULL AND state NOT IN ('finished', 'failed', 'cancelled', 'cancelling')
    RETURNING state INTO new_state;
    IF new_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s changed while being resumed', job);
    END IF;
    -- Tasks added, paused, by a transaction that held the job row until the update above.
    UPDATE deckhand.task SET pause = NULL, state = CASE WHEN state = 'paused' THEN 'runnable' ELSE state END
    WHERE job_id = job AND state IN ('blocked', 'paused', 'running') AND pause IS NOT NULL;
    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_state;
END $$;

-- cancel as in 0004_security.sql; paused tasks are cancelled at once, and the job's pause ends.
CREATE OR REPLACE FUNCTION deckhand.cancel(job bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    cancelled_now int;
    new_state text;
BEGIN
    PERFORM deckhand.job_for_control(job, 'cancel');
    -- Task rows are locked in id order before the job row, the order every writer uses.
    WITH target AS (
        SELECT id FROM deckhand.task WHERE job_id = job AND state IN ('blocked', 'runnable', 'running', 'paused')
        ORDER BY id FOR UPDATE
    ), moved AS (
        UPDATE deckhand.task t
        SET state = CASE WHEN t.state = 'running' THEN 'cancelling' ELSE 'cancelled' END,
            finished_at = CASE WHEN t.state = 'running' THEN NULL ELSE now() END,
            pause = NULL
        FROM target WHERE t.id = target.id
        RETURNING t.state
    )
    SELECT count(*) FILTER (WHERE state = 'cancelled') INTO cancelled_now FROM moved;
    UPDATE deckhand.job SET cancel_requested_at = coalesce(cancel_requested_at, now()),
        tasks_cancelled = tasks_cancelled + cancelled_now, pause = NULL, paused_at = NULL, pause_waits_for = 0
    WHERE id = job AND state NOT IN ('finished', 'failed', 'cancelled')
    RETURNING state INTO new_state;
    IF new_state IS NULL THEN
        SELECT state INTO new_state FROM deckhand.job WHERE id = job;
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s has ended: it is already %s', job, new_state);
    END IF;
    PERFORM pg_notify('deckhand_cancel', '');
    RETURN new_state;
END $$;

REVOKE ALL ON FUNCTION deckhand.pause(bigint, boolean), deckhand.resume(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.pause(bigint, boolean), deckhand.resume(bigint) TO deckhand_submitter, deckhand_worker;

-- Priorities. Claims take a node's runnable tasks in the order of their claim_key, earliest
-- first: the time their job was submitted, moved earlier by a minute per point of the job's
-- priority (-100 to 100). A job of priority 10 goes before jobs of priority 0 submitted up to
-- ten minutes before it, and after older ones: waiting raises a job's place as priority
-- does, so no job waits behind higher priorities for longer than the difference in minutes.
-- The key is written once, with the task, and is the first column of every runnable set's
-- index (0008_queues.sql, 0005, 0003): a claim reads the tasks it takes in that order, and
-- nothing else, as before.
ALTER TABLE deckhand.job ADD COLUMN priority int NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100);
-- Tasks already there keep their order among themselves: their key is the same instant, and
-- ids break ties.
ALTER TABLE deckhand.task ADD COLUMN claim_key timestamptz NOT NULL DEFAULT now();

DROP INDEX deckhand.task_runnable_anywhere_idx, deckhand.task_runnable_node_idx, deckhand.task_runnable_export_idx,
    deckhand.task_runnable_group_idx;
CREATE INDEX task_runnable_anywhere_idx ON deckhand.task (claim_key, id)
    WHERE state = 'runnable' AND node IS NULL AND node_group IS NULL;
CREATE INDEX task_runnable_node_idx ON deckhand.task (node, claim_key, id)
    WHERE state = 'runnable' AND node_group IS NULL AND node IS NOT NULL AND kind <> 'export';
CREATE INDEX task_runnable_export_idx ON deckhand.task (node, claim_key, id)
    WHERE state = 'runnable' AND node_group IS NULL AND kind = 'export';
CREATE INDEX task_runnable_group_idx ON deckhand.task (node_group, claim_key, id)
    WHERE state = 'runnable' AND node_group IS NOT NULL;

CREATE OR REPLACE VIEW deckhand.jobs WITH (security_barrier) AS
    SELECT id, description, kind, submitted_by, state, tasks_total, tasks_done, tasks_failed,
           tasks_cancelled, tasks_unscheduled,
           tasks_total - tasks_done - tasks_failed - tasks_cancelled - tasks_unscheduled AS tasks_pending,
           created_at, started_at, finished_at, finished_at - created_at AS duration, cancel_requested_at,
           notify_key, key, paused_at, priority
    FROM deckhand.job
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(submitted_by, owners);

-- submit_job as in 0008_queues.sql, with the job's key and priority.
CREATE OR REPLACE FUNCTION deckhand.submit_job(spec jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Its statements handle one row per task: JIT compilation costs more than it saves, and sorts of
-- large jobs belong in memory.
SET jit = off SET work_mem = '64MB' AS $$
DECLARE
    me constant text := session_user;
    tasks jsonb := spec -> 'tasks';
    settings jsonb := coalesce(nullif(spec -> 'settings', 'null'), '{}');
    label text := spec ->> 'kind';
    msg text;
    new_id bigint;
    max_timeout constant interval := make_interval(secs => 2147483.647);
    positions jsonb; -- {name: position of the task in the spec, from 1}
    needed jsonb;    -- {name: true} for every task that another task depends on
    ids bigint[];    -- ids[position]: the id of each task, increasing along the spec
    job_key text := spec ->> 'key';
    job_priority int;
    holder deckhand.job; -- the unfinished job of the submitter that holds job_key
BEGIN
    IF NOT (pg_has_role(me, 'deckhand_submitter', 'MEMBER') OR deckhand.is_admin()) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not submit jobs: an admin can GRANT deckhand_submitter TO %s', me, quote_ident(me));
    END IF;
    IF jsonb_typeof(spec) IS DISTINCT FROM 'object' THEN
        PERFORM deckhand.input_error('the job spec must be a JSON object');
    END IF;
    SELECT format('unknown field %L in the job spec (known: description, key, kind, priority, search_path, settings, tasks)', k)
      INTO msg FROM jsonb_object_keys(spec) k
     WHERE k <> ALL ('{description,key,kind,priority,search_path,settings,tasks}') LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;
    IF jsonb_typeof(tasks) IS DISTINCT FROM 'array' OR jsonb_array_length(tasks) = 0 THEN
        PERFORM deckhand.input_error('job has no tasks');
    END IF;
    IF jsonb_array_length(tasks) > 1000000 THEN
        PERFORM deckhand.input_error('a job has at most 1000000 tasks');
    END IF;
    IF jsonb_typeof(spec -> 'description') NOT IN ('string', 'null') OR jsonb_typeof(spec -> 'search_path') NOT IN ('string', 'null')
       OR jsonb_typeof(spec -> 'kind') NOT IN ('string', 'null') THEN
        PERFORM deckhand.input_error('description, kind and search_path must be strings');
    END IF;
    IF length(spec ->> 'description') > 10000 OR length(spec ->> 'search_path') > 10000 THEN
        PERFORM deckhand.input_error('description and search_path are limited to 10000 characters');
    END IF;
    IF jsonb_typeof(spec -> 'key') NOT IN ('string', 'null') THEN
        PERFORM deckhand.input_error('key must be a string');
    END IF;
    msg := deckhand.key_problem(job_key);
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;
    IF jsonb_typeof(spec -> 'priority') NOT IN ('number', 'null')
       OR jsonb_typeof(spec -> 'priority') = 'number' AND ((spec ->> 'priority')::numeric NOT BETWEEN -100 AND 100
                                                         OR (spec ->> 'priority')::numeric % 1 <> 0) THEN
        PERFORM deckhand.input_error('priority must be a whole number between -100 and 100');
    END IF;
    job_priority := coalesce((spec ->> 'priority')::int, 0);
    IF label IS NOT NULL AND label !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM deckhand.input_error(format('job kind %L: use a lower-case word such as sql or drop', label));
    END IF;
    IF jsonb_typeof(settings) <> 'object' THEN
        PERFORM deckhand.input_error('settings must be an object of setting names and string values');
    END IF;
    SELECT CASE WHEN s.key !~ '^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$' THEN format('settings: %L is not a valid setting name', s.key)
                WHEN lower(s.key) IN ('application_name', 'statement_timeout', 'search_path', 'role', 'session_authorization')
                    THEN format('settings: %s is set by deckhand (use the task''s timeout and the job''s search_path)', s.key)
                WHEN jsonb_typeof(s.value) <> 'string' THEN format('settings: the value of %s must be a string', s.key) END
      INTO msg FROM jsonb_each(settings) s
     WHERE s.key !~ '^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$'
        OR lower(s.key) IN ('application_name', 'statement_timeout', 'search_path', 'role', 'session_authorization')
        OR jsonb_typeof(s.value) <> 'string'
     ORDER BY s.key LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    -- Each task's fields, in one pass; the first problem in spec order is reported. The
    -- subquery reads each field once (OFFSET 0 keeps the planner from copying its expressions
    -- into every test that uses them).
    SELECT m INTO msg FROM (
        SELECT f.ord, CASE
            WHEN f.type <> 'object' THEN format('task #%s is not an object', f.ord)
            WHEN f.name_type IS DISTINCT FROM 'string' OR f.name = '' THEN format('task #%s: name is missing', f.ord)
            WHEN octet_length(f.name) > 63 OR f.name ~ '[[:cntrl:]]' OR btrim(f.name) <> f.name
                THEN format('task %L: a name is at most 63 bytes, without control characters or surrounding spaces', f.name)
            WHEN f.t - '{name,kind,node,owner,sql,payload,depends_on,max_attempts,timeout,transaction}'::text[] <> '{}'
                THEN format('task %L: unknown field %L', f.name, (SELECT k FROM jsonb_object_keys(f.t) k
                  WHERE k <> ALL ('{name,kind,node,owner,sql,payload,depends_on,max_attempts,timeout,transaction}') LIMIT 1))
            WHEN f.kind_type NOT IN ('string', 'null') OR f.node_type NOT IN ('string', 'null')
                 OR f.owner_type NOT IN ('string', 'null') OR f.sql_type NOT IN ('string', 'null')
                THEN format('task %L: kind, node, owner and sql must be strings', f.name)
            WHEN f.kind !~ '^[a-z][a-z0-9_]{0,62}$' THEN format('task %L: kind %L is not a kind name', f.name, f.kind)
            WHEN tk.submittable = false THEN format('task %L: tasks of kind %s are created by deckhand itself (use `deckhand export`)', f.name, f.kind)
            WHEN f.kind = 'sql' AND btrim(coalesce(f.sql, '')) = '' THEN format('task %L: sql is empty', f.name)
            WHEN f.kind <> 'sql' AND coalesce(f.sql, '') <> '' THEN format('task %L: kind %s does not take sql', f.name, f.kind)
            WHEN f.kind IN ('sql', 'noop') AND f.payload_type NOT IN ('null') THEN format('task %L: kind %s does not take a payload', f.name, f.kind)
            WHEN f.kind = 'move_table' AND deckhand.conninfo_has_secret(f.t -> 'payload' ->> 'source_conninfo')
                THEN format('task %L: source_conninfo must not contain a password; use pgpass or certificates on the nodes', f.name)
            WHEN tk.needs_node AND coalesce(f.node, '') = '' THEN format('task %L: node is required for kind %s', f.name, f.kind)
            WHEN coalesce(f.node, '') <> '' AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = f.node)
                THEN format('task %L: unknown node %L (see `deckhand node list`)', f.name, f.node)
            WHEN f.has_owner AND (f.owner = '' OR octet_length(f.owner) > 63)
                THEN format('task %L: owner must be a role name', f.name)
            WHEN f.attempts_type NOT IN ('number', 'null')
                 OR f.attempts_type = 'number' AND ((f.t ->> 'max_attempts')::numeric NOT BETWEEN 1 AND 1000
                                                    OR (f.t ->> 'max_attempts')::numeric % 1 <> 0)
                THEN format('task %L: max_attempts must be a whole number between 1 and 1000', f.name)
            WHEN f.timeout_type NOT IN ('null') AND (f.timeout IS NULL OR f.timeout <= interval '0' OR f.timeout > max_timeout)
                THEN format('task %L: timeout must be a positive duration of at most 24 days (PostgreSQL''s statement_timeout limit), got %s',
                            f.name, f.t -> 'timeout')
            WHEN f.transaction_type NOT IN ('boolean', 'null') THEN format('task %L: transaction must be true or false', f.name)
            WHEN f.deps_type NOT IN ('array', 'null')
                 OR f.deps_type = 'array' AND CASE jsonb_array_length(f.deps)
                        WHEN 0 THEN false
                        WHEN 1 THEN jsonb_typeof(f.deps -> 0) <> 'string'
                        ELSE EXISTS (SELECT 1 FROM jsonb_array_elements(f.deps) d WHERE jsonb_typeof(d) <> 'string') END
                THEN format('task %L: depends_on must be a list of task names', f.name)
            END AS m
        FROM (
            SELECT e.ord, e.t, jsonb_typeof(e.t) AS type,
                   e.t ->> 'name' AS name, jsonb_typeof(e.t -> 'name') AS name_type,
                   coalesce(nullif(e.t ->> 'kind', ''), CASE WHEN e.t ? 'sql' THEN 'sql' END, '') AS kind,
                   jsonb_typeof(e.t -> 'kind') AS kind_type,
                   e.t ->> 'node' AS node, jsonb_typeof(e.t -> 'node') AS node_type,
                   e.t ? 'owner' AS has_owner, e.t ->> 'owner' AS owner, jsonb_typeof(e.t -> 'owner') AS owner_type,
                   e.t ->> 'sql' AS sql, jsonb_typeof(e.t -> 'sql') AS sql_type,
                   jsonb_typeof(e.t -> 'payload') AS payload_type,
                   jsonb_typeof(e.t -> 'max_attempts') AS attempts_type,
                   deckhand.to_timeout(e.t -> 'timeout') AS timeout, jsonb_typeof(e.t -> 'timeout') AS timeout_type,
                   jsonb_typeof(e.t -> 'transaction') AS transaction_type,
                   e.t -> 'depends_on' AS deps, jsonb_typeof(e.t -> 'depends_on') AS deps_type
            FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
            OFFSET 0) f
        LEFT JOIN deckhand.task_kind tk ON tk.name = f.kind
    ) x WHERE m IS NOT NULL ORDER BY ord LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    -- Names are unique; every dependency names a task listed before the one that needs it
    -- ("depends_on": null is no dependency).
    -- Names are resolved through positions, a jsonb object (a binary search per name): no
    -- statement below joins, so no plan depends on the planner's guess at how many tasks there
    -- are, and none looks anything up in the task table.
    positions := (SELECT jsonb_object_agg(e.t ->> 'name', e.ord) FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord));
    IF (SELECT count(*) FROM jsonb_object_keys(positions)) < jsonb_array_length(tasks) THEN
        SELECT format('duplicate task name %L', e.t ->> 'name') INTO msg
          FROM jsonb_array_elements(tasks) e(t) GROUP BY e.t ->> 'name' HAVING count(*) > 1 LIMIT 1;
        PERFORM deckhand.input_error(msg);
    END IF;
    SELECT m INTO msg FROM (
        SELECT e.ord, d.i,
               CASE WHEN d.dep = e.t ->> 'name' THEN format('task %L: depends on itself', e.t ->> 'name')
                    WHEN p.pos IS NULL THEN format('task %L: depends on unknown task %L', e.t ->> 'name', d.dep)
                    ELSE format('task %L: depends on %L, which is listed after it: list every task after the tasks it depends on', e.t ->> 'name', d.dep) END
        FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
        CROSS JOIN LATERAL jsonb_array_elements_text(nullif(e.t -> 'depends_on', 'null')) WITH ORDINALITY AS d(dep, i)
        CROSS JOIN LATERAL (SELECT (positions ->> d.dep)::bigint AS pos) p
        WHERE p.pos IS NULL OR p.pos >= e.ord
        UNION ALL
        -- A name listed twice: only lists of two or more can hold one, and each is sorted once.
        SELECT e.ord, d.i, format('task %L: depends_on lists %L twice', e.t ->> 'name', d.dep)
        FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
        CROSS JOIN LATERAL (SELECT x.dep, x.i, row_number() OVER (PARTITION BY x.dep ORDER BY x.i) AS nth
                            FROM jsonb_array_elements_text(nullif(e.t -> 'depends_on', 'null')) WITH ORDINALITY AS x(dep, i)) d
        WHERE jsonb_array_length(nullif(e.t -> 'depends_on', 'null')) > 1 AND d.nth = 2
    ) problem(ord, i, m) ORDER BY ord, i LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    -- A key is held by one unfinished job of its submitter: the unique index job_key_idx decides
    -- between concurrent submissions (the second waits for the first to commit). The holder may
    -- end between the conflict and the look-up: then the key is free, and the insert is tried again.
    LOOP
        INSERT INTO deckhand.job (description, kind, search_path, settings, tasks_total, owners, key, priority)
        SELECT deckhand.redact(coalesce(spec ->> 'description', '')),
               coalesce(label, coalesce(nullif(tasks -> 0 ->> 'kind', ''), 'sql')),
               coalesce(spec ->> 'search_path', ''), settings, jsonb_array_length(tasks),
               ARRAY(SELECT DISTINCT coalesce(e.t ->> 'owner', me) FROM jsonb_array_elements(tasks) e(t) ORDER BY 1),
               job_key, job_priority
        ON CONFLICT (submitted_by, key) WHERE key IS NOT NULL AND state NOT IN ('finished', 'failed', 'cancelled') DO NOTHING
        RETURNING id INTO new_id;
        EXIT WHEN new_id IS NOT NULL;
        SELECT * INTO holder FROM deckhand.job
         WHERE submitted_by = me AND key = job_key AND state NOT IN ('finished', 'failed', 'cancelled');
        IF FOUND THEN
            PERFORM deckhand.key_taken(holder);
        END IF;
    END LOOP;

    -- Ids are taken first, in spec order, so that they grow along every dependency.
    ids := ARRAY(SELECT nextval('deckhand.task_id_seq') FROM generate_series(1, jsonb_array_length(tasks)) ORDER BY 1);
    needed := (SELECT jsonb_object_agg(d.dep, true)
               FROM jsonb_array_elements(tasks) e(t) CROSS JOIN LATERAL jsonb_array_elements_text(nullif(e.t -> 'depends_on', 'null')) d(dep));
    INSERT INTO deckhand.task (id, job_id, name, kind, node, owner, sql, payload, in_transaction, max_attempts,
                               timeout, state, pending_deps, has_dependents, claim_key)
    SELECT ids[e.ord], new_id, e.t ->> 'name', coalesce(nullif(e.t ->> 'kind', ''), 'sql'),
           nullif(e.t ->> 'node', ''), coalesce(e.t ->> 'owner', me), coalesce(e.t ->> 'sql', ''),
           nullif(e.t -> 'payload', 'null'), coalesce((e.t ->> 'transaction')::boolean, true),
           coalesce((e.t ->> 'max_attempts')::int, 3), coalesce(deckhand.to_timeout(e.t -> 'timeout'), interval '1 hour'),
           CASE WHEN jsonb_array_length(coalesce(deps, '[]')) > 0 THEN 'blocked' ELSE 'runnable' END,
           jsonb_array_length(coalesce(deps, '[]')), coalesce(needed ? (e.t ->> 'name'), false),
           now() - make_interval(mins => job_priority)
    FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord),
         LATERAL (SELECT nullif(e.t -> 'depends_on', 'null') AS deps) d;
    INSERT INTO deckhand.task_dep (task_id, depends_on)
    SELECT ids[e.ord], ids[(positions ->> d.dep)::int]
    FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
    CROSS JOIN LATERAL jsonb_array_elements_text(nullif(e.t -> 'depends_on', 'null')) d(dep);

    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_id;
END $$;
