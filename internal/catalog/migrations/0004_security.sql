-- deckhand catalog: roles, and the rule that nobody writes the catalog directly but workers.
--
-- Trust model (docs/security.md): every row may have been written by a hostile user unless the
-- catalog itself made that impossible. So submitters and admins hold no INSERT, UPDATE, DELETE
-- or TRUNCATE on any table: they call the SECURITY DEFINER functions below, which take the
-- caller's identity from session_user (SET ROLE does not change it) and enforce who may do
-- what. Workers (deckhand_worker) keep direct access: they run what the catalog holds, so they
-- are trusted like the catalog's owner.
--
-- Every function here runs with search_path = pg_catalog, pg_temp, so no object a caller
-- creates can stand in for one it uses.

-- Roles are cluster-wide and shared by every catalog of the cluster: create them only when
-- missing, tolerating another catalog's init creating them at the same moment.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['deckhand_submitter', 'deckhand_admin', 'deckhand_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
    -- Admins may do everything submitters may.
    IF NOT pg_catalog.pg_has_role('deckhand_admin', 'deckhand_submitter', 'MEMBER') THEN
        BEGIN
            GRANT deckhand_submitter TO deckhand_admin;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END $$;

-- The submitter of a job, the owner of each task and what each task runs never change once
-- written; neither does the role a cleanup operation removes as.
ALTER TABLE deckhand.job ADD COLUMN owners text[] NOT NULL DEFAULT '{}';
UPDATE deckhand.job j SET owners = ARRAY(SELECT DISTINCT t.owner FROM deckhand.task t WHERE t.job_id = j.id ORDER BY 1);
ALTER TABLE deckhand.operation ADD COLUMN submitted_by text;
UPDATE deckhand.operation o SET submitted_by = j.submitted_by FROM deckhand.job j WHERE j.id = o.job_id;

-- Anyone who may connect to the catalog's database may LISTEN there: a job's notifications
-- name it by a key of its own, which only those who may see the job read (deckhand.jobs), and
-- cancellations name no job at all.
ALTER TABLE deckhand.job ADD COLUMN notify_key uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid();
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

CREATE FUNCTION deckhand.refuse_identity_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'deckhand: % of % % cannot change once written', TG_ARGV[0], TG_TABLE_NAME, OLD.id
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER job_identity BEFORE UPDATE OF submitted_by, owners, search_path, settings ON deckhand.job
    FOR EACH ROW WHEN (OLD.submitted_by IS DISTINCT FROM NEW.submitted_by OR OLD.owners IS DISTINCT FROM NEW.owners
                       OR OLD.search_path IS DISTINCT FROM NEW.search_path OR OLD.settings IS DISTINCT FROM NEW.settings)
    EXECUTE FUNCTION deckhand.refuse_identity_change('submitter, owners and session context');
CREATE TRIGGER task_identity BEFORE UPDATE OF job_id, owner, kind, sql, payload, in_transaction ON deckhand.task
    FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id OR OLD.owner IS DISTINCT FROM NEW.owner
                       OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.sql IS DISTINCT FROM NEW.sql
                       OR OLD.payload IS DISTINCT FROM NEW.payload OR OLD.in_transaction IS DISTINCT FROM NEW.in_transaction)
    EXECUTE FUNCTION deckhand.refuse_identity_change('job, owner and work');
CREATE TRIGGER operation_identity BEFORE UPDATE OF job_id, owner, submitted_by ON deckhand.operation
    FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id OR OLD.owner IS DISTINCT FROM NEW.owner
                       OR OLD.submitted_by IS DISTINCT FROM NEW.submitted_by)
    EXECUTE FUNCTION deckhand.refuse_identity_change('job, owner and submitter');

-- Who the caller is. session_user is the role that logged in; SET ROLE and SECURITY DEFINER
-- functions leave it alone.

-- is_admin: a member of deckhand_admin, the owner of the catalog schema, or a superuser (who
-- is a member of every role).
CREATE FUNCTION deckhand.is_admin() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(session_user, 'deckhand_admin', 'MEMBER')
        OR EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'deckhand' AND nspowner = (SELECT oid FROM pg_roles WHERE rolname = session_user))
$$;

-- sees_all: admins and workers read every job.
CREATE FUNCTION deckhand.sees_all() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT deckhand.is_admin() OR pg_has_role(session_user, 'deckhand_worker', 'MEMBER')
$$;

-- member_of: the caller is a member of role, which exists in this cluster. Roles are matched by
-- name across the catalog's cluster and the nodes'; the nodes check membership again on their own.
CREATE FUNCTION deckhand.member_of(role text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role)
                THEN pg_has_role(session_user, role::name, 'MEMBER') ELSE false END
$$;

-- may_act_on: the caller may see, cancel and retry a job: its submitter, a member of every
-- owner of its tasks, or an admin (workers too, for reading).
CREATE FUNCTION deckhand.may_act_on(submitted_by text, owners text[]) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT submitted_by = session_user
        OR deckhand.sees_all()
        OR (cardinality(owners) > 0 AND NOT EXISTS (SELECT 1 FROM unnest(owners) o WHERE NOT deckhand.member_of(o)))
$$;

-- conninfo_has_secret: dsn, a conninfo in either form, looks as if it holds a password. The
-- client parses conninfo fully (internal/conninfo); this is the catalog's own, broader check,
-- for what reaches it through psql. In keyword/value form a keyword follows white space, or
-- directly the quote that closes the value before it (dbname='shop'password=...).
CREATE FUNCTION deckhand.conninfo_has_secret(dsn text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
    SELECT lower(dsn) ~ '(^|[\s?&''])(ssl)?password\s*='
        OR dsn ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/@?#]*:[^/@?#]*@'
        OR dsn ~ '[?&][^=&#]*%[^=&#]*='
$$;

-- redact hides password=... style secrets and URL passwords in text that is stored and shown
-- (descriptions, errors). deckhand refuses secrets where it takes conninfo and URLs; this
-- guards what other programs quote back, such as an error naming a connection string.
CREATE FUNCTION deckhand.redact(s text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT regexp_replace(
               regexp_replace(s, '([a-z][a-z0-9+.-]*://[^:/@\s]*):[^@/\s]*@', '\1:REDACTED@', 'gi'),
               '\m((ssl)?pass(word)?|secret|(access_)?token|aws_secret_access_key)(\s*=\s*)(''([^''\\]|\\.)*''?|[^\s&]*)',
               '\1\5REDACTED', 'gi')
$$;

-- Task kinds the catalog knows. submit refuses the internal ones (an export's coordinator and
-- parts are created by deckhand.submit_export and by the coordinator itself) and requires a node
-- for those that need one. Kinds a program embedding deckhand registers with its workers are
-- accepted without a row here: their executors get the job's submitter and must check it.
CREATE TABLE deckhand.task_kind (
    name        text PRIMARY KEY,
    needs_node  boolean NOT NULL,
    submittable boolean NOT NULL
);
INSERT INTO deckhand.task_kind VALUES
    ('sql', true, true), ('noop', false, true), ('drop', true, true), ('move_table', true, true),
    ('export', true, false), ('export_part', false, false);

-- input_error raises the error submitters see for bad input: one line, SQLSTATE 22023.
CREATE FUNCTION deckhand.input_error(msg text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = msg;
END $$;

-- to_timeout reads a task timeout: a number of seconds or an interval ('10m', '1h30m',
-- '90 seconds'); NULL when it is neither. Numbers, what clients send, take no subtransaction.
CREATE FUNCTION deckhand.interval_or_null(s text) RETURNS interval
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN s::interval;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;

CREATE FUNCTION deckhand.to_timeout(v jsonb) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE pg_catalog.jsonb_typeof(v)
        WHEN 'number' THEN CASE WHEN pg_catalog.abs(v::pg_catalog.float8) < 1e9
                                THEN pg_catalog.make_interval(secs => v::pg_catalog.float8) END
        WHEN 'string' THEN deckhand.interval_or_null(v OPERATOR(pg_catalog.#>>) '{}') END
$$;

-- submit_job writes a job and its tasks for the caller (session_user), who becomes the job's
-- submitter for good. spec is the JSON of `deckhand job submit` with every task listed after
-- the tasks it depends on (so the graph has no cycle) and search_path set. It checks the shape
-- of the spec and that nodes exist; that the submitter may act as each owner is checked on the
-- node, by the client before submitting and by the worker before it runs anything.
CREATE FUNCTION deckhand.submit_job(spec jsonb) RETURNS bigint
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
BEGIN
    IF NOT (pg_has_role(me, 'deckhand_submitter', 'MEMBER') OR deckhand.is_admin()) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not submit jobs: an admin can GRANT deckhand_submitter TO %s', me, quote_ident(me));
    END IF;
    IF jsonb_typeof(spec) IS DISTINCT FROM 'object' THEN
        PERFORM deckhand.input_error('the job spec must be a JSON object');
    END IF;
    SELECT format('unknown field %L in the job spec (known: description, kind, search_path, settings, tasks)', k)
      INTO msg FROM jsonb_object_keys(spec) k
     WHERE k <> ALL ('{description,kind,search_path,settings,tasks}') LIMIT 1;
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

    -- Each task's fields, in one pass; the first problem in spec order is reported.
    SELECT m INTO msg FROM (
        SELECT e.ord, CASE
            WHEN jsonb_typeof(e.t) <> 'object' THEN format('task #%s is not an object', e.ord)
            WHEN jsonb_typeof(e.t -> 'name') IS DISTINCT FROM 'string' OR e.t ->> 'name' = ''
                THEN format('task #%s: name is missing', e.ord)
            WHEN octet_length(e.t ->> 'name') > 63 OR e.t ->> 'name' ~ '[[:cntrl:]]' OR btrim(e.t ->> 'name') <> e.t ->> 'name'
                THEN format('task %L: a name is at most 63 bytes, without control characters or surrounding spaces', e.t ->> 'name')
            WHEN e.t - '{name,kind,node,owner,sql,payload,depends_on,max_attempts,timeout,transaction}'::text[] <> '{}'
                THEN format('task %L: unknown field %L', e.t ->> 'name', (SELECT k FROM jsonb_object_keys(e.t) k
                  WHERE k <> ALL ('{name,kind,node,owner,sql,payload,depends_on,max_attempts,timeout,transaction}') LIMIT 1))
            WHEN jsonb_typeof(e.t -> 'kind') NOT IN ('string', 'null') OR jsonb_typeof(e.t -> 'node') NOT IN ('string', 'null')
                 OR jsonb_typeof(e.t -> 'owner') NOT IN ('string', 'null') OR jsonb_typeof(e.t -> 'sql') NOT IN ('string', 'null')
                THEN format('task %L: kind, node, owner and sql must be strings', e.t ->> 'name')
            WHEN k.kind !~ '^[a-z][a-z0-9_]{0,62}$' THEN format('task %L: kind %L is not a kind name', e.t ->> 'name', k.kind)
            WHEN tk.submittable = false THEN format('task %L: tasks of kind %s are created by deckhand itself (use `deckhand export`)', e.t ->> 'name', k.kind)
            WHEN k.kind = 'sql' AND btrim(coalesce(e.t ->> 'sql', '')) = '' THEN format('task %L: sql is empty', e.t ->> 'name')
            WHEN k.kind <> 'sql' AND coalesce(e.t ->> 'sql', '') <> '' THEN format('task %L: kind %s does not take sql', e.t ->> 'name', k.kind)
            WHEN k.kind IN ('sql', 'noop') AND jsonb_typeof(e.t -> 'payload') NOT IN ('null') THEN format('task %L: kind %s does not take a payload', e.t ->> 'name', k.kind)
            WHEN k.kind = 'move_table' AND deckhand.conninfo_has_secret(e.t -> 'payload' ->> 'source_conninfo')
                THEN format('task %L: source_conninfo must not contain a password; use pgpass or certificates on the nodes', e.t ->> 'name')
            WHEN tk.needs_node AND coalesce(e.t ->> 'node', '') = '' THEN format('task %L: node is required for kind %s', e.t ->> 'name', k.kind)
            WHEN coalesce(e.t ->> 'node', '') <> '' AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = e.t ->> 'node')
                THEN format('task %L: unknown node %L (see `deckhand node list`)', e.t ->> 'name', e.t ->> 'node')
            WHEN e.t ? 'owner' AND (e.t ->> 'owner' = '' OR octet_length(e.t ->> 'owner') > 63)
                THEN format('task %L: owner must be a role name', e.t ->> 'name')
            WHEN jsonb_typeof(e.t -> 'max_attempts') NOT IN ('number', 'null')
                 OR (e.t -> 'max_attempts') IS NOT NULL AND jsonb_typeof(e.t -> 'max_attempts') = 'number'
                    AND ((e.t ->> 'max_attempts')::numeric NOT BETWEEN 1 AND 1000 OR (e.t ->> 'max_attempts')::numeric % 1 <> 0)
                THEN format('task %L: max_attempts must be a whole number between 1 and 1000', e.t ->> 'name')
            WHEN jsonb_typeof(e.t -> 'timeout') NOT IN ('null') AND (k.timeout IS NULL OR k.timeout <= interval '0' OR k.timeout > max_timeout)
                THEN format('task %L: timeout must be a positive duration of at most 24 days (PostgreSQL''s statement_timeout limit), got %s',
                            e.t ->> 'name', e.t -> 'timeout')
            WHEN jsonb_typeof(e.t -> 'transaction') NOT IN ('boolean', 'null') THEN format('task %L: transaction must be true or false', e.t ->> 'name')
            WHEN jsonb_typeof(e.t -> 'depends_on') NOT IN ('array', 'null')
                 OR EXISTS (SELECT 1 FROM jsonb_array_elements(e.t -> 'depends_on') d WHERE jsonb_typeof(d) <> 'string')
                THEN format('task %L: depends_on must be a list of task names', e.t ->> 'name')
            END AS m
        FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
        CROSS JOIN LATERAL (SELECT coalesce(nullif(e.t ->> 'kind', ''), CASE WHEN e.t ? 'sql' THEN 'sql' END, '') AS kind,
                                   deckhand.to_timeout(e.t -> 'timeout') AS timeout) k
        LEFT JOIN deckhand.task_kind tk ON tk.name = k.kind
    ) x WHERE m IS NOT NULL ORDER BY ord LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    -- Names are unique; every dependency names a task listed before the one that needs it.
    SELECT format('duplicate task name %L', e.t ->> 'name') INTO msg
      FROM jsonb_array_elements(tasks) e(t) GROUP BY e.t ->> 'name' HAVING count(*) > 1 LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;
    WITH named AS (
        SELECT e.t ->> 'name' AS name, e.ord, e.t -> 'depends_on' AS deps
        FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
    )
    SELECT CASE WHEN d.dep = n.name THEN format('task %L: depends on itself', n.name)
                WHEN p.name IS NULL THEN format('task %L: depends on unknown task %L', n.name, d.dep)
                WHEN d.dup > 1 THEN format('task %L: depends_on lists %L twice', n.name, d.dep)
                ELSE format('task %L: depends on %L, which is listed after it: list every task after the tasks it depends on', n.name, d.dep) END
      INTO msg
      FROM named n
      CROSS JOIN LATERAL (SELECT x.dep, count(*) OVER (PARTITION BY x.dep) AS dup
                          FROM jsonb_array_elements_text(coalesce(n.deps, '[]')) x(dep)) d
      LEFT JOIN named p ON p.name = d.dep
     WHERE p.ord IS NULL OR p.ord >= n.ord OR d.dup > 1
     ORDER BY n.ord LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    INSERT INTO deckhand.job (description, kind, search_path, settings, tasks_total, owners)
    SELECT deckhand.redact(coalesce(spec ->> 'description', '')),
           coalesce(label, coalesce(nullif(tasks -> 0 ->> 'kind', ''), 'sql')),
           coalesce(spec ->> 'search_path', ''), settings, jsonb_array_length(tasks),
           ARRAY(SELECT DISTINCT coalesce(e.t ->> 'owner', me) FROM jsonb_array_elements(tasks) e(t) ORDER BY 1)
    RETURNING id INTO new_id;

    WITH src AS (
        SELECT e.ord, e.t ->> 'name' AS name, coalesce(nullif(e.t ->> 'kind', ''), 'sql') AS kind,
               nullif(e.t ->> 'node', '') AS node, coalesce(e.t ->> 'owner', me) AS owner,
               coalesce(e.t ->> 'sql', '') AS sql, nullif(e.t -> 'payload', 'null') AS payload,
               coalesce((e.t ->> 'transaction')::boolean, true) AS in_tx,
               coalesce((e.t ->> 'max_attempts')::int, 3) AS max_attempts,
               coalesce(deckhand.to_timeout(e.t -> 'timeout'), interval '1 hour') AS timeout,
               coalesce(e.t -> 'depends_on', '[]') AS deps
        FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
    ), inserted AS (
        INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, payload, in_transaction, max_attempts,
                                   timeout, state, pending_deps)
        SELECT new_id, name, kind, node, owner, sql, payload, in_tx, max_attempts, timeout,
               CASE WHEN jsonb_array_length(deps) > 0 THEN 'blocked' ELSE 'runnable' END, jsonb_array_length(deps)
        FROM src ORDER BY ord
        RETURNING id, name
    )
    INSERT INTO deckhand.task_dep (task_id, depends_on)
    SELECT t.id, p.id
    FROM src s CROSS JOIN LATERAL jsonb_array_elements_text(s.deps) d(dep)
    JOIN inserted t ON t.name = s.name
    JOIN inserted p ON p.name = d.dep;

    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_id;
END $$;

-- submit is what SQL users call: deckhand.submit('{"tasks": [...]}'). It runs as the caller,
-- only to capture the caller's search_path for the job when the spec names none, and hands
-- the spec to submit_job.
CREATE FUNCTION deckhand.submit(spec jsonb) RETURNS bigint
LANGUAGE sql AS $$
    SELECT deckhand.submit_job(CASE WHEN spec OPERATOR(pg_catalog.?) 'search_path' THEN spec
        ELSE spec OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('search_path', pg_catalog.current_setting('search_path')) END)
$$;

-- job_for_control locks nothing; it finds a job and checks that the caller may act on it.
CREATE FUNCTION deckhand.job_for_control(job bigint, verb text) RETURNS deckhand.job
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    j deckhand.job;
BEGIN
    SELECT * INTO j FROM deckhand.job WHERE id = job;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('job %s: not found', job);
    END IF;
    IF NOT deckhand.may_act_on(j.submitted_by, j.owners) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not %s job %s: only its submitter, a member of every role its tasks run as, or a deckhand admin may',
                             session_user, verb, job);
    END IF;
    RETURN j;
END $$;

-- cancel cancels blocked and runnable tasks at once and marks running ones cancelling (their
-- workers are told on deckhand_cancel and cancel the backend on the node). It returns the
-- job's state after the request.
CREATE FUNCTION deckhand.cancel(job bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    cancelled_now int;
    new_state text;
BEGIN
    PERFORM deckhand.job_for_control(job, 'cancel');
    -- Task rows are locked in id order before the job row, the order every writer uses.
    WITH target AS (
        SELECT id FROM deckhand.task WHERE job_id = job AND state IN ('blocked', 'runnable', 'running')
        ORDER BY id FOR UPDATE
    ), moved AS (
        UPDATE deckhand.task t
        SET state = CASE WHEN t.state = 'running' THEN 'cancelling' ELSE 'cancelled' END,
            finished_at = CASE WHEN t.state = 'running' THEN NULL ELSE now() END
        FROM target WHERE t.id = target.id
        RETURNING t.state
    )
    SELECT count(*) FILTER (WHERE state = 'cancelled') INTO cancelled_now FROM moved;
    UPDATE deckhand.job SET cancel_requested_at = coalesce(cancel_requested_at, now()),
        tasks_cancelled = tasks_cancelled + cancelled_now
    WHERE id = job AND state NOT IN ('finished', 'failed', 'cancelled')
    RETURNING state INTO new_state;
    IF new_state IS NULL THEN
        SELECT state INTO new_state FROM deckhand.job WHERE id = job;
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s has ended: it is already %s', job, new_state);
    END IF;
    PERFORM pg_notify('deckhand_cancel', '');
    RETURN new_state;
END $$;

-- retry re-runs the failed, unscheduled and cancelled tasks of a failed or cancelled job, with
-- their attempt counters reset; tasks that finished are not run again. It returns the job's state.
CREATE FUNCTION deckhand.retry(job bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    current_state text;
    new_state text;
BEGIN
    SELECT state INTO current_state FROM deckhand.job_for_control(job, 'retry');
    IF current_state NOT IN ('failed', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('job %s is %s: only failed or cancelled jobs can be retried', job, current_state);
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
        attempts = 0, not_before = '-infinity', finished_at = NULL,
        node = CASE WHEN t.node_group IS NOT NULL THEN NULL ELSE t.node END
    FROM pending p WHERE t.id = p.id;
    UPDATE deckhand.job SET cancel_requested_at = NULL, tasks_failed = 0, tasks_cancelled = 0,
        tasks_unscheduled = 0, finished_at = NULL
    WHERE id = job AND state IN ('failed', 'cancelled')
    RETURNING state INTO new_state;
    IF new_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state', MESSAGE = format('job %s changed while being retried', job);
    END IF;
    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_state;
END $$;

-- wait returns the job's state once it has ended, or when timeout has passed (NULL: no limit),
-- whichever comes first. Call it outside an explicit REPEATABLE READ transaction: it must see
-- the job change.
CREATE FUNCTION deckhand.wait(job bigint, timeout interval DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    deadline constant timestamptz := CASE WHEN timeout IS NULL THEN 'infinity' ELSE clock_timestamp() + timeout END;
    nap float8 := 0.005;
    st text;
BEGIN
    PERFORM deckhand.job_for_control(job, 'wait for');
    LOOP
        SELECT state INTO st FROM deckhand.job WHERE id = job;
        IF st IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('job %s no longer exists', job);
        END IF;
        IF st IN ('finished', 'failed', 'cancelled') OR clock_timestamp() >= deadline THEN
            RETURN st;
        END IF;
        IF timeout IS NOT NULL THEN
            nap := least(nap, greatest(extract(epoch FROM deadline - clock_timestamp()), 0));
        END IF;
        PERFORM pg_sleep(nap);
        nap := least(greatest(nap, 0.005) * 2, 0.25);
    END LOOP;
END $$;

-- Admin functions: nodes, settings, pins and cleanup records.
CREATE FUNCTION deckhand.require_admin(what text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT deckhand.is_admin() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not %s: that takes a deckhand admin (GRANT deckhand_admin TO %s)', session_user, what, quote_ident(session_user));
    END IF;
END $$;

-- node_add registers a node, or updates it. The conninfo must not carry a secret: workers take
-- credentials from their own environment (pgpass, certificates).
CREATE FUNCTION deckhand.node_add(name text, dsn text, node_group text DEFAULT NULL, max_tasks int DEFAULT 4) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM deckhand.require_admin('manage nodes');
    IF name IS NULL OR name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        PERFORM deckhand.input_error(format('node %L: name must be 1-63 letters, digits, ''_'', ''.'' or ''-''', name));
    END IF;
    IF max_tasks IS NULL OR max_tasks NOT BETWEEN 1 AND 10000 THEN
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
    VALUES (node_add.name, node_add.dsn, coalesce(nullif(node_add.node_group, ''), node_add.name), node_add.max_tasks)
    ON CONFLICT ON CONSTRAINT node_pkey DO UPDATE SET dsn = EXCLUDED.dsn, node_group = EXCLUDED.node_group,
        max_tasks = EXCLUDED.max_tasks, role = 'unknown', replay_lsn = NULL, checked_at = NULL;
END $$;

CREATE FUNCTION deckhand.node_remove(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM deckhand.require_admin('manage nodes');
    DELETE FROM deckhand.node n WHERE n.name = node_remove.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('node %s: not found', to_json(name));
    END IF;
END $$;

-- set_setting stores a catalog-wide setting; a NULL value removes it (back to the default).
CREATE FUNCTION deckhand.set_setting(name text, value text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM deckhand.require_admin('change settings');
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM deckhand.input_error(format('setting %L: a setting name is a lower-case word', name));
    END IF;
    IF value IS NULL THEN
        DELETE FROM deckhand.setting s WHERE s.name = set_setting.name;
    ELSE
        INSERT INTO deckhand.setting AS s (name, value) VALUES (set_setting.name, set_setting.value)
        ON CONFLICT ON CONSTRAINT setting_pkey DO UPDATE SET value = EXCLUDED.value;
    END IF;
END $$;

-- pin keeps a resource alive until unpin: the cleaner and deckhand's drops refuse it.
CREATE FUNCTION deckhand.pin(resource_type text, node text, location text, name text, reason text DEFAULT '') RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_id bigint;
BEGIN
    PERFORM deckhand.require_admin('pin resources');
    IF resource_type IS NULL OR resource_type <> ALL ('{table,index,schema,publication,subscription,replication_slot,object,prefix}') THEN
        PERFORM deckhand.input_error(format('cannot pin a %s', coalesce(resource_type, 'resource of no type')));
    END IF;
    IF coalesce(name, '') = '' THEN
        PERFORM deckhand.input_error('a pin names a resource');
    END IF;
    INSERT INTO deckhand.cleanup_pin (resource_type, node, location, name, reason)
    VALUES (pin.resource_type, nullif(pin.node, ''), coalesce(pin.location, ''), pin.name, coalesce(pin.reason, ''))
    RETURNING id INTO new_id;
    RETURN new_id;
END $$;

-- unpin removes a pin; due records it held back are tried at once.
CREATE FUNCTION deckhand.unpin(pin bigint) RETURNS void
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
    WHERE state = 'due' AND wait_reason = 'pinned' AND coalesce(node, '') = coalesce(p.node, '') AND location = p.location;
    IF FOUND THEN
        PERFORM pg_notify('deckhand_cleanup', '');
    END IF;
END $$;

-- cleanup_retry makes a failed or node_removed record due again, its error count reset: an
-- operator fixed the cause (granted a privilege, re-added the node).
CREATE FUNCTION deckhand.cleanup_retry(record bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    current_state text;
BEGIN
    PERFORM deckhand.require_admin('retry cleanup records');
    BEGIN
        UPDATE deckhand.cleanup_record SET state = 'due', wait_reason = NULL, errors = 0,
            next_attempt_at = '-infinity', ended_at = NULL
        WHERE id = record AND state IN ('failed', 'node_removed');
    EXCEPTION WHEN unique_violation THEN
        PERFORM deckhand.input_error(format('cannot retry cleanup record %s: a newer record of the same resource is live', record));
    END;
    IF FOUND THEN
        PERFORM pg_notify('deckhand_cleanup', '');
        RETURN;
    END IF;
    SELECT state INTO current_state FROM deckhand.cleanup_records WHERE id = record;
    IF current_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('cleanup record %s: not found', record);
    END IF;
    PERFORM deckhand.input_error(format('cannot retry cleanup record %s: it is %s (want failed or node_removed)', record, current_state));
END $$;

-- cleanup_forget gives up on a record: the resource, if it still exists, is the operator's to
-- keep or drop. Records of running operations cannot be forgotten.
CREATE FUNCTION deckhand.cleanup_forget(record bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    current_state text;
BEGIN
    PERFORM deckhand.require_admin('forget cleanup records');
    UPDATE deckhand.cleanup_record r SET state = 'forgotten', wait_reason = NULL, ended_at = now(),
        last_error = coalesce(r.last_error || '; ', '') || 'forgotten by ' || session_user
    FROM deckhand.operation o
    WHERE r.id = record AND o.id = r.operation_id
      AND (r.state IN ('due', 'failed', 'node_removed') OR (r.state = 'pending' AND o.state <> 'running'));
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT state INTO current_state FROM deckhand.cleanup_records WHERE id = record;
    IF current_state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('cleanup record %s: not found', record);
    END IF;
    PERFORM deckhand.input_error(format('cannot forget cleanup record %s: it is %s (want due, failed or node_removed)', record, current_state));
END $$;

-- Views show each role what it may act on: everything to admins and workers, to others the jobs
-- they submitted or whose every owner they are a member of, and the cleanup records of their
-- own jobs. security_barrier keeps a caller's own functions from seeing rows before the filter.
CREATE OR REPLACE VIEW deckhand.jobs WITH (security_barrier) AS
    SELECT id, description, kind, submitted_by, state, tasks_total, tasks_done, tasks_failed,
           tasks_cancelled, tasks_unscheduled,
           tasks_total - tasks_done - tasks_failed - tasks_cancelled - tasks_unscheduled AS tasks_pending,
           created_at, started_at, finished_at, finished_at - created_at AS duration, cancel_requested_at,
           notify_key
    FROM deckhand.job
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(submitted_by, owners);

CREATE OR REPLACE VIEW deckhand.tasks WITH (security_barrier) AS
    SELECT t.id, t.job_id, t.name, t.kind, t.node, t.owner, t.state, t.attempts, t.max_attempts, t.runs,
           t.not_before, t.worker_id, t.started_at, t.finished_at, t.timeout, t.in_transaction,
           t.last_error ->> 'sqlstate' AS last_sqlstate, t.last_error ->> 'message' AS last_error,
           ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                 WHERE d.task_id = t.id ORDER BY p.name) AS depends_on,
           t.sql,
           t.last_error AS error, -- the whole error: sqlstate, message, detail, hint
           ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                 WHERE d.task_id = t.id ORDER BY p.id) AS depends_on_in_order
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners);

CREATE OR REPLACE VIEW deckhand.task_attempts WITH (security_barrier) AS
    SELECT a.task_id, t.job_id, t.name AS task_name, a.attempt, a.token, a.worker_id, a.outcome,
           a.started_at, a.finished_at, a.sqlstate, a.message, a.detail, a.hint
    FROM deckhand.task_attempt a JOIN deckhand.task t ON t.id = a.task_id JOIN deckhand.job j ON j.id = t.job_id
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners)
    UNION ALL
    SELECT t.id, t.job_id, t.name, t.runs, t.attempt_token, t.worker_id, t.state,
           t.started_at, NULL, NULL, NULL, NULL, NULL
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE t.state IN ('running', 'cancelling')
      AND ((SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners));

CREATE OR REPLACE VIEW deckhand.exports WITH (security_barrier) AS
    SELECT e.id, e.job_id, e.source_table, e.partition, e.node_group, e.destination,
           CASE WHEN e.state IN ('committed', 'superseded') THEN e.state
                WHEN j.state IN ('failed', 'failing') THEN 'failed'
                WHEN j.state IN ('cancelled', 'cancelling') THEN 'cancelled'
                ELSE e.state END AS state,
           e.parts_total,
           (SELECT count(*) FROM deckhand.export_part p
             WHERE p.export_id = e.id AND p.epoch = e.epoch AND p.finished_at IS NOT NULL) AS parts_done,
           (SELECT coalesce(sum(p.rows), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS rows,
           (SELECT coalesce(sum(p.bytes), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS bytes,
           ARRAY(SELECT t.name || ': ' || (t.last_error ->> 'message')
                 FROM deckhand.task t
                 WHERE t.job_id = e.job_id AND t.last_error IS NOT NULL ORDER BY t.id) AS errors,
           e.consistency_lsn, e.epoch, e.compression, e.part_size, e.forced, e.manifest_url, e.error,
           e.created_at, e.planned_at, e.finished_at, e.columns
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners);

CREATE OR REPLACE VIEW deckhand.operations WITH (security_barrier) AS
    SELECT id, job_id, task_id, attempt_token, worker_id, owner, description, state, end_reason,
           created_at, ended_at
    FROM deckhand.operation
    WHERE (SELECT deckhand.sees_all()) OR submitted_by = session_user;

CREATE OR REPLACE VIEW deckhand.cleanup_records WITH (security_barrier) AS
    SELECT r.id, r.operation_id, o.job_id, o.task_id, o.owner, o.state AS operation_state,
           r.resource_type, r.node, r.location, r.name, r.policy,
           CASE WHEN r.state IN ('pending', 'due') AND r.node IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = r.node) THEN 'node_removed'
                WHEN r.state = 'due' AND r.wait_reason IS NOT NULL THEN r.wait_reason
                ELSE r.state END AS state,
           r.attempts, r.errors, r.last_error,
           CASE WHEN r.state = 'due' THEN nullif(r.next_attempt_at, '-infinity') END AS next_attempt_at,
           r.created_at, r.due_at, r.ended_at
    FROM deckhand.cleanup_record r JOIN deckhand.operation o ON o.id = r.operation_id
    WHERE (SELECT deckhand.sees_all()) OR o.submitted_by = session_user;

CREATE OR REPLACE VIEW deckhand.cleanup_pins WITH (security_barrier) AS
    SELECT p.id, p.resource_type, p.node, p.location, p.name, p.operation_id, o.job_id, p.reason,
           p.created_by, p.created_at, (p.operation_id IS NULL OR o.state = 'running') AS in_force
    FROM deckhand.cleanup_pin p LEFT JOIN deckhand.operation o ON o.id = p.operation_id
    WHERE (SELECT deckhand.sees_all()) OR o.submitted_by = session_user;

-- Messages already stored may quote secrets from before they were redacted on the way in.
UPDATE deckhand.job SET description = deckhand.redact(description) WHERE description <> deckhand.redact(description);
UPDATE deckhand.node SET last_error = deckhand.redact(last_error) WHERE last_error <> deckhand.redact(last_error);

-- The catalog refuses direct writes by anyone but workers and its owner, whatever privileges a
-- role was granted by mistake (GRANT ALL ON ALL TABLES ...): every table carries a statement
-- trigger that checks the role writing. Writes made inside deckhand's SECURITY DEFINER
-- functions run as the catalog's owner and pass. A table added later gets the same trigger.
CREATE FUNCTION deckhand.guard_writes() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_has_role(current_user, 'deckhand_worker', 'MEMBER')
       OR EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'deckhand'
                  AND nspowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = format('%s may not write deckhand.%s directly: deckhand''s functions (deckhand.submit, deckhand.cancel, ...) do that', current_user, TG_TABLE_NAME);
END $$;

DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p') LOOP
        EXECUTE pg_catalog.format('CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.%I
            FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes()', t);
    END LOOP;
END $$;

-- Privileges. Nobody but workers writes a table; everybody reads through the views.
REVOKE ALL ON SCHEMA deckhand FROM PUBLIC;
GRANT USAGE ON SCHEMA deckhand TO deckhand_submitter, deckhand_admin, deckhand_worker;
REVOKE ALL ON ALL TABLES IN SCHEMA deckhand FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA deckhand FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA deckhand FROM PUBLIC;
-- Earlier versions left access to the operator, who may have granted roles table privileges
-- directly: from now on they come from the deckhand roles only.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT c.relname, a.grantee::regrole::text AS grantee,
                    CASE WHEN c.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
             WHERE n.nspname = 'deckhand' AND a.grantee <> 0 AND a.grantee <> c.relowner LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s deckhand.%I FROM %s', g.kind, g.relname, g.grantee);
    END LOOP;
END $$;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA deckhand TO deckhand_worker;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA deckhand TO deckhand_worker;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA deckhand TO deckhand_worker;
GRANT SELECT ON deckhand.jobs, deckhand.tasks, deckhand.task_attempts, deckhand.nodes, deckhand.workers,
    deckhand.exports, deckhand.operations, deckhand.cleanup_records, deckhand.cleanup_pins,
    deckhand.schema_migration, deckhand.task_kind
    TO deckhand_submitter;
GRANT EXECUTE ON FUNCTION deckhand.submit(jsonb), deckhand.submit_job(jsonb), deckhand.cancel(bigint),
    deckhand.retry(bigint), deckhand.wait(bigint, interval), deckhand.is_admin(), deckhand.sees_all(),
    deckhand.member_of(text), deckhand.may_act_on(text, text[]), deckhand.redact(text)
    TO deckhand_submitter;
GRANT SELECT ON deckhand.setting TO deckhand_admin;
-- The admin functions check for an admin themselves (require_admin), so a submitter who calls
-- one hears what it takes rather than a bare "permission denied".
GRANT EXECUTE ON FUNCTION deckhand.node_add(text, text, text, int), deckhand.node_remove(text),
    deckhand.set_setting(text, text), deckhand.pin(text, text, text, text, text), deckhand.unpin(bigint),
    deckhand.cleanup_retry(bigint), deckhand.cleanup_forget(bigint), deckhand.require_admin(text)
    TO deckhand_submitter;
