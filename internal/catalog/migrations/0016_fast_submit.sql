-- Faster submission of large jobs. submit_job as in 0011_job_control.sql, checking the same
-- things with the same messages and writing the same rows, with less work per task:
--   - a kind is checked with '^[a-z][a-z0-9_]*$' and its length rather than with
--     '^[a-z][a-z0-9_]{0,62}$', whose bounded repetition made the regular expression cost
--     about 6 microseconds per task, half of the checks of a 100,000-task job;
--   - positions is built from two arrays with jsonb_object (jsonb_object_agg builds a jsonb
--     value per row), and each dependency is looked up in it once, into arrays that one walk
--     checks (unknown, itself, listed after, listed twice) and that the task_dep rows are
--     written from; the statement that names the problem runs only when there is one;
--   - has_dependents comes from that walk rather than from a second object of every name
--     depended on;
--   - each timeout is read once, for the checks and the rows, and max_attempts is checked as
--     the number it is rather than parsed twice from its text.

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
    task_count int;
    names text[];    -- the name of each task, in spec order
    positions jsonb; -- {name: position of the task in the spec, as a string}
    dep_task int[];  -- dependency k: task dep_task[k] depends on the task at dep_pos[k],
    dep_pos int[];   --   in spec order (NULL: no task of that name)
    seen int[];      -- seen[position]: the last task found depending on it, 0 for none
    bad_deps boolean := false;
    dependent int;   -- one dependency of the walk: position of the task that depends,
    prerequisite int; -- and of the task it depends on
    ids bigint[];    -- ids[position]: the id of each task, increasing along the spec
    timeouts interval[]; -- timeouts[position]: the timeout of each task (see below)
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

    -- Each task's timeout, read once for the checks and for its row: the default when it has
    -- none, 0 (refused below) when it is not a duration. No element is NULL, so that
    -- timeouts[i] is found directly rather than by counting the NULLs before it.
    timeouts := ARRAY(SELECT coalesce(deckhand.to_timeout(e.t -> 'timeout'),
                                      CASE WHEN coalesce(jsonb_typeof(e.t -> 'timeout'), 'null') = 'null'
                                           THEN interval '1 hour' ELSE interval '0' END)
                      FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord) ORDER BY e.ord);

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
            WHEN f.kind !~ '^[a-z][a-z0-9_]*$' OR octet_length(f.kind) > 63 THEN format('task %L: kind %L is not a kind name', f.name, f.kind)
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
                 OR f.attempts NOT BETWEEN 1 AND 1000 OR f.attempts % 1 <> 0
                THEN format('task %L: max_attempts must be a whole number between 1 and 1000', f.name)
            WHEN f.timeout_type NOT IN ('null') AND (f.timeout <= interval '0' OR f.timeout > max_timeout)
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
                   CASE WHEN jsonb_typeof(e.t -> 'max_attempts') = 'number' THEN (e.t -> 'max_attempts')::numeric END AS attempts,
                   timeouts[e.ord] AS timeout, jsonb_typeof(e.t -> 'timeout') AS timeout_type,
                   jsonb_typeof(e.t -> 'transaction') AS transaction_type,
                   e.t -> 'depends_on' AS deps, jsonb_typeof(e.t -> 'depends_on') AS deps_type
            FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
            OFFSET 0) f
        LEFT JOIN deckhand.task_kind tk ON tk.name = f.kind
    ) x WHERE m IS NOT NULL ORDER BY ord LIMIT 1;
    IF msg IS NOT NULL THEN PERFORM deckhand.input_error(msg); END IF;

    -- Names are unique; every dependency names a task listed before the one that needs it
    -- ("depends_on": null is no dependency), and at most once.
    -- Names are resolved through positions, a jsonb object (a binary search per name): no
    -- statement below joins, so no plan depends on the planner's guess at how many tasks there
    -- are, and none looks anything up in the task table. Each name is looked up once: the
    -- positions found serve the checks, has_dependents and the rows of task_dep.
    task_count := jsonb_array_length(tasks);
    names := ARRAY(SELECT e.t ->> 'name' FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord) ORDER BY e.ord);
    positions := jsonb_object(names, ARRAY(SELECT i::text FROM generate_series(1, task_count) i));
    IF (SELECT count(*) FROM jsonb_object_keys(positions)) < task_count THEN
        SELECT format('duplicate task name %L', e.t ->> 'name') INTO msg
          FROM jsonb_array_elements(tasks) e(t) GROUP BY e.t ->> 'name' HAVING count(*) > 1 LIMIT 1;
        PERFORM deckhand.input_error(msg);
    END IF;
    SELECT array_agg(e.ord ORDER BY e.ord, d.i), array_agg((positions ->> d.dep)::int ORDER BY e.ord, d.i)
      INTO dep_task, dep_pos
      FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord)
      CROSS JOIN LATERAL jsonb_array_elements_text(nullif(e.t -> 'depends_on', 'null')) WITH ORDINALITY AS d(dep, i);
    -- One walk along the dependencies, which come task by task: a name listed twice by a task
    -- is a position seen already for that task. seen also says which tasks have dependents.
    seen := array_fill(0, ARRAY[task_count]);
    FOR k IN 1 .. coalesce(cardinality(dep_task), 0) LOOP
        dependent := dep_task[k];
        prerequisite := dep_pos[k];
        IF prerequisite IS NULL OR prerequisite >= dependent OR seen[prerequisite] = dependent THEN
            bad_deps := true;
            EXIT;
        END IF;
        seen[prerequisite] := dependent;
    END LOOP;
    -- The first problem in spec order, named.
    IF bad_deps THEN
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
        PERFORM deckhand.input_error(msg);
    END IF;

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
    ids := ARRAY(SELECT nextval('deckhand.task_id_seq') FROM generate_series(1, task_count) ORDER BY 1);
    INSERT INTO deckhand.task (id, job_id, name, kind, node, owner, sql, payload, in_transaction, max_attempts,
                               timeout, state, pending_deps, has_dependents, claim_key)
    SELECT ids[e.ord], new_id, e.t ->> 'name', coalesce(nullif(e.t ->> 'kind', ''), 'sql'),
           nullif(e.t ->> 'node', ''), coalesce(e.t ->> 'owner', me), coalesce(e.t ->> 'sql', ''),
           nullif(e.t -> 'payload', 'null'), coalesce((e.t ->> 'transaction')::boolean, true),
           coalesce((e.t ->> 'max_attempts')::int, 3), timeouts[e.ord],
           CASE WHEN jsonb_array_length(coalesce(deps, '[]')) > 0 THEN 'blocked' ELSE 'runnable' END,
           jsonb_array_length(coalesce(deps, '[]')), seen[e.ord] <> 0,
           now() - make_interval(mins => job_priority)
    FROM jsonb_array_elements(tasks) WITH ORDINALITY AS e(t, ord),
         LATERAL (SELECT nullif(e.t -> 'depends_on', 'null') AS deps) d;
    INSERT INTO deckhand.task_dep (task_id, depends_on)
    SELECT ids[d.t], ids[d.p] FROM unnest(dep_task, dep_pos) AS d(t, p);

    PERFORM pg_notify('deckhand_runnable', '');
    RETURN new_id;
END $$;
