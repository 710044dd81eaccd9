-- Schedules: a job spec that the leader submits at each due time, for the role that created
-- the schedule (its submitter). A firing is a row of schedule_run, keyed by the schedule and
-- the due time, written in the same transaction as the job it submits and as the move of the
-- schedule's next_run_at past that due time: each due time fires exactly once, whichever
-- leader gets there, however often leaders fail over (see docs/operations.md, Schedules).
--
-- next_run_at is computed by the leader (package schedule parses cron expressions); NULL
-- means "from now": set by schedule_add from psql and by schedule_resume, so that a schedule
-- resumed after a long pause does not fire for the time it was paused.
CREATE TABLE deckhand.schedule (
    id           bigserial PRIMARY KEY,
    -- Names are the submitter's own, like job keys: nobody can take a name from another role,
    -- nor learn from a refusal that another role's schedule has it.
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
    submitted_by text NOT NULL,
    UNIQUE (submitted_by, name),
    -- The job spec as `deckhand job submit` reads it, with every task's owner and the
    -- search_path filled in at creation.
    spec         jsonb NOT NULL,
    owners       text[] NOT NULL,
    cron         text,
    timezone     text,
    every        interval,
    skip_missed  boolean NOT NULL DEFAULT false,
    no_overlap   boolean NOT NULL DEFAULT false,
    paused       boolean NOT NULL DEFAULT false,
    next_run_at  timestamptz,
    last_due_at  timestamptz,
    last_job_id  bigint,
    last_outcome text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every IS NULL)),
    CHECK (every IS NULL OR every >= interval '1 second'),
    CHECK (timezone IS NULL OR cron IS NOT NULL),
    -- A due time the leader can compute with ('infinity': never again); see next_run_problem.
    CHECK (next_run_at IS NULL OR next_run_at = 'infinity'
           OR next_run_at >= '2000-01-01 00:00:00+00' AND next_run_at < '9000-01-01 00:00:00+00')
);
CREATE INDEX schedule_due_idx ON deckhand.schedule (next_run_at NULLS FIRST) WHERE NOT paused;

-- Outcomes of a firing:
--   submitted        the job was written (job_id);
--   skipped_overlap  --no-overlap and the previous job had not ended;
--   skipped_missed   --skip-missed and the due time passed while no leader ran;
--   failed           the submission was refused (error): the submitter lost a right, the
--                    spec is no longer valid (a node was removed), ...
-- missed counts the earlier due times that passed while no leader ran and were folded into
-- this firing (a missed window fires once).
CREATE TABLE deckhand.schedule_run (
    schedule_id bigint NOT NULL REFERENCES deckhand.schedule (id) ON DELETE CASCADE,
    due_at      timestamptz NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('submitted', 'skipped_overlap', 'skipped_missed', 'failed')),
    missed      int NOT NULL DEFAULT 0,
    job_id      bigint,
    error       text,
    fired_at    timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, due_at)
);
CREATE INDEX schedule_run_fired_idx ON deckhand.schedule_run (fired_at);

-- The schedule that made a job, for good.
ALTER TABLE deckhand.job ADD COLUMN schedule_id bigint;
CREATE INDEX job_schedule_idx ON deckhand.job (schedule_id, id) WHERE schedule_id IS NOT NULL;
CREATE TRIGGER job_schedule_identity BEFORE UPDATE OF schedule_id ON deckhand.job
    FOR EACH ROW WHEN (OLD.schedule_id IS DISTINCT FROM NEW.schedule_id)
    EXECUTE FUNCTION deckhand.refuse_identity_change('schedule');

-- The submitter of a job is the session user, except for a schedule's firing: the leader, a
-- worker, writes the job with the schedule's id, and the job's submitter is the schedule's.
-- Submitters cannot reach this path: they write jobs only through submit_job, which never
-- sets schedule_id, and a schedule_id set by anyone but a worker or the catalog's owner is
-- dropped.
CREATE OR REPLACE FUNCTION deckhand.force_submitter() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.schedule_id IS NOT NULL
       AND (pg_has_role(session_user, 'deckhand_worker', 'MEMBER')
            OR EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'deckhand'
                       AND nspowner = (SELECT oid FROM pg_roles WHERE rolname = session_user))) THEN
        NEW.submitted_by := (SELECT s.submitted_by FROM deckhand.schedule s WHERE s.id = NEW.schedule_id);
        IF NEW.submitted_by IS NULL THEN
            RAISE EXCEPTION 'deckhand: schedule % does not exist', NEW.schedule_id;
        END IF;
    ELSE
        NEW.submitted_by := session_user;
        NEW.schedule_id := NULL;
    END IF;
    RETURN NEW;
END $$;

-- may_submit: role may submit jobs (what submit_job requires of its caller).
CREATE FUNCTION deckhand.may_submit(role text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role)
       AND (pg_has_role(role::name, 'deckhand_submitter', 'MEMBER') OR pg_has_role(role::name, 'deckhand_admin', 'MEMBER')
            OR EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'deckhand'
                       AND nspowner = (SELECT oid FROM pg_roles WHERE rolname = role)))
$$;

-- next_run_problem says what is wrong with a due time given by a caller, or NULL. The leader
-- reads due times into its own clock's type and counts the due times a late one missed: a
-- '-infinity' would stop it from reading any schedule (everyone's would stop firing), and
-- one from long ago would count more missed firings than fit.
CREATE FUNCTION deckhand.next_run_problem(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN t IS NOT NULL AND NOT (t >= '2000-01-01 00:00:00+00' AND t < '9000-01-01 00:00:00+00')
                THEN format('next run time %s: give a time between the years 2000 and 9000, or none', t) END
$$;
REVOKE ALL ON FUNCTION deckhand.next_run_problem(timestamptz) FROM PUBLIC;

-- schedule_add creates a schedule for the caller (session_user), its submitter for good.
-- Exactly one of cron (five fields, or @hourly, @daily, ...; in timezone, default UTC) and
-- every (at least a second) is given. next_run_at is the first due time as the client
-- computed it; NULL lets the leader compute it. `deckhand schedule add` checks the spec as
-- `deckhand job submit` does before calling this; each firing checks it again.
CREATE FUNCTION deckhand.schedule_add(name text, spec jsonb, cron text DEFAULT NULL, timezone text DEFAULT NULL,
                                      every interval DEFAULT NULL,
                                      skip_missed boolean DEFAULT false, no_overlap boolean DEFAULT false,
                                      next_run_at timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    me constant text := session_user;
    normalized jsonb;
    new_id bigint;
BEGIN
    IF NOT deckhand.may_submit(me) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not submit jobs: an admin can GRANT deckhand_submitter TO %s', me, quote_ident(me));
    END IF;
    IF name IS NULL OR name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        PERFORM deckhand.input_error(format('schedule name %L: use 1-63 letters, digits, ''_'', ''.'' or ''-''', name));
    END IF;
    IF (cron IS NULL) = (every IS NULL) THEN
        PERFORM deckhand.input_error('a schedule takes either a cron expression or an interval (every), not both');
    END IF;
    IF every IS NOT NULL AND every < interval '1 second' THEN
        PERFORM deckhand.input_error(format('every %s: the interval must be at least one second', every));
    END IF;
    IF length(cron) > 200 OR cron ~ '[[:cntrl:]]' THEN
        PERFORM deckhand.input_error('the cron expression is limited to 200 characters without control characters');
    END IF;
    IF timezone IS NOT NULL THEN
        IF cron IS NULL THEN
            PERFORM deckhand.input_error('a time zone applies to cron expressions only');
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE pg_timezone_names.name = timezone) THEN
            PERFORM deckhand.input_error(format('unknown time zone %L (use a name such as Europe/Paris or UTC)', timezone));
        END IF;
    END IF;
    IF deckhand.next_run_problem(next_run_at) IS NOT NULL THEN
        PERFORM deckhand.input_error(deckhand.next_run_problem(next_run_at));
    END IF;
    IF jsonb_typeof(spec) IS DISTINCT FROM 'object' OR jsonb_typeof(spec -> 'tasks') IS DISTINCT FROM 'array'
       OR jsonb_array_length(spec -> 'tasks') = 0 THEN
        PERFORM deckhand.input_error('the job spec must be a JSON object with a non-empty list of tasks');
    END IF;
    IF octet_length(spec::text) > 1048576 THEN
        PERFORM deckhand.input_error('a schedule''s job spec is limited to 1 MB');
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(spec -> 'tasks') e(t)
               WHERE jsonb_typeof(e.t) <> 'object' OR jsonb_typeof(e.t -> 'owner') NOT IN ('string', 'null')) THEN
        PERFORM deckhand.input_error('each task must be an object whose owner, if given, is a string');
    END IF;
    -- Owners default to the submitter now, not to whoever fires the schedule.
    normalized := jsonb_set(spec, '{tasks}', (
        SELECT jsonb_agg(CASE WHEN coalesce(e.t ->> 'owner', '') = '' THEN e.t || jsonb_build_object('owner', me) ELSE e.t END
                         ORDER BY e.ord)
        FROM jsonb_array_elements(spec -> 'tasks') WITH ORDINALITY AS e(t, ord)));
    IF coalesce(normalized ->> 'search_path', '') = '' THEN
        normalized := normalized || jsonb_build_object('search_path', current_setting('search_path'));
    END IF;
    BEGIN
        INSERT INTO deckhand.schedule (name, submitted_by, spec, owners, cron, timezone, every, skip_missed, no_overlap, next_run_at)
        VALUES (name, me, normalized,
                ARRAY(SELECT DISTINCT e.t ->> 'owner' FROM jsonb_array_elements(normalized -> 'tasks') e(t) ORDER BY 1),
                cron, timezone, every, coalesce(skip_missed, false), coalesce(no_overlap, false), next_run_at)
        RETURNING id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM deckhand.input_error(format('schedule %L already exists (see `deckhand schedule list`)', name));
    END;
    RETURN new_id;
END $$;

-- schedule_ref reads a reference to a schedule: NAME is the caller's own schedule of that
-- name (or, when it has none, the one of another role it may act on); SUBMITTER/NAME another
-- role's (names hold no '/', role names may).
CREATE FUNCTION deckhand.schedule_ref(ref text, OUT submitter text, OUT name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN strpos(ref, '/') > 0 THEN left(ref, length(ref) - strpos(reverse(ref), '/')) ELSE session_user::text END,
           CASE WHEN strpos(ref, '/') > 0 THEN right(ref, strpos(reverse(ref), '/') - 1) ELSE ref END
$$;

-- schedule_for_control finds a schedule by reference (schedule_ref) that the caller may
-- change: its submitter or an admin.
CREATE FUNCTION deckhand.schedule_for_control(schedule text, verb text) RETURNS deckhand.schedule
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s deckhand.schedule;
BEGIN
    SELECT * INTO s FROM deckhand.schedule
    WHERE (submitted_by, name) = (SELECT r.submitter, r.name FROM deckhand.schedule_ref(schedule) r) FOR UPDATE;
    IF NOT FOUND AND strpos(schedule, '/') = 0 THEN
        -- No schedule of the caller's own by that name: the one of another role it may act on.
        IF (SELECT count(*) FROM deckhand.schedule o WHERE o.name = schedule
            AND deckhand.may_act_on(o.submitted_by, o.owners)) > 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('several schedules are named %s: name one as SUBMITTER/NAME', schedule);
        END IF;
        SELECT * INTO s FROM deckhand.schedule o WHERE o.name = schedule
            AND deckhand.may_act_on(o.submitted_by, o.owners) FOR UPDATE;
    END IF;
    IF NOT FOUND OR NOT (s.submitted_by = session_user OR deckhand.may_act_on(s.submitted_by, s.owners)) THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('schedule %s: not found', schedule);
    END IF;
    IF NOT (s.submitted_by = session_user OR deckhand.is_admin()) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not %s schedule %s: only its submitter (%s) or a deckhand admin may', session_user, verb, schedule, s.submitted_by);
    END IF;
    RETURN s;
END $$;

CREATE FUNCTION deckhand.schedule_pause(schedule text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s deckhand.schedule := deckhand.schedule_for_control(schedule, 'pause');
BEGIN
    UPDATE deckhand.schedule SET paused = true WHERE id = s.id;
END $$;

-- schedule_resume starts a paused schedule again from now: the due times it was paused for
-- do not fire. next_run_at as for schedule_add.
CREATE FUNCTION deckhand.schedule_resume(schedule text, next_run_at timestamptz DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s deckhand.schedule := deckhand.schedule_for_control(schedule, 'resume');
BEGIN
    IF deckhand.next_run_problem(next_run_at) IS NOT NULL THEN
        PERFORM deckhand.input_error(deckhand.next_run_problem(next_run_at));
    END IF;
    IF s.paused THEN
        UPDATE deckhand.schedule SET paused = false, next_run_at = next_run_at WHERE id = s.id;
    END IF;
END $$;

-- schedule_remove deletes a schedule and its firings; the jobs it submitted stay, and keep
-- its id.
CREATE FUNCTION deckhand.schedule_remove(schedule text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    s deckhand.schedule := deckhand.schedule_for_control(schedule, 'remove');
BEGIN
    DELETE FROM deckhand.schedule WHERE id = s.id;
END $$;

-- Views: a schedule is seen by those who may act on the jobs it submits (its submitter, a
-- member of every owner, admins and workers).
CREATE VIEW deckhand.schedules WITH (security_barrier) AS
    SELECT s.id, s.name, s.submitted_by, s.owners,
           CASE WHEN s.cron IS NOT NULL THEN 'cron ' || s.cron || ' ' || coalesce(s.timezone, 'UTC')
                ELSE 'every ' || s.every::text END AS timing,
           s.cron, s.timezone, s.every, s.skip_missed, s.no_overlap, s.paused,
           format('%s task%s%s', jsonb_array_length(s.spec -> 'tasks'),
                  CASE WHEN jsonb_array_length(s.spec -> 'tasks') = 1 THEN '' ELSE 's' END,
                  coalesce(': ' || nullif(s.spec ->> 'description', ''), '')) AS spec_summary,
           CASE WHEN s.paused OR s.next_run_at = 'infinity' THEN NULL ELSE s.next_run_at END AS next_run_at,
           s.last_due_at, s.last_outcome, s.last_error, s.last_job_id, j.state AS last_job_state,
           s.created_at, s.spec
    FROM deckhand.schedule s LEFT JOIN deckhand.job j ON j.id = s.last_job_id
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(s.submitted_by, s.owners);

CREATE VIEW deckhand.schedule_runs WITH (security_barrier) AS
    SELECT r.schedule_id, s.name AS schedule, r.due_at, r.outcome, r.missed, r.job_id, j.state AS job_state,
           r.error, r.fired_at
    FROM deckhand.schedule_run r JOIN deckhand.schedule s ON s.id = r.schedule_id
    LEFT JOIN deckhand.job j ON j.id = r.job_id
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(s.submitted_by, s.owners);

-- The schedule of each scheduled job, for those who may see the job.
CREATE VIEW deckhand.job_schedules WITH (security_barrier) AS
    SELECT j.id AS job_id, j.schedule_id, s.name AS schedule,
           (SELECT r.due_at FROM deckhand.schedule_run r WHERE r.schedule_id = j.schedule_id AND r.job_id = j.id) AS due_at
    FROM deckhand.job j LEFT JOIN deckhand.schedule s ON s.id = j.schedule_id
    WHERE j.schedule_id IS NOT NULL
      AND ((SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners));
CREATE INDEX schedule_run_job_idx ON deckhand.schedule_run (job_id) WHERE job_id IS NOT NULL;

CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.schedule
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.schedule_run
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

REVOKE ALL ON deckhand.schedule, deckhand.schedule_run, deckhand.schedules, deckhand.schedule_runs,
    deckhand.job_schedules FROM PUBLIC;
REVOKE ALL ON FUNCTION deckhand.may_submit(text),
    deckhand.schedule_add(text, jsonb, text, text, interval, boolean, boolean, timestamptz),
    deckhand.schedule_for_control(text, text), deckhand.schedule_pause(text),
    deckhand.schedule_resume(text, timestamptz), deckhand.schedule_remove(text), deckhand.schedule_ref(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.schedule_ref(text) TO deckhand_submitter, deckhand_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.schedule, deckhand.schedule_run TO deckhand_worker;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE deckhand.schedule_id_seq TO deckhand_worker;
GRANT SELECT ON deckhand.schedules, deckhand.schedule_runs, deckhand.job_schedules TO deckhand_submitter, deckhand_worker;
GRANT EXECUTE ON FUNCTION deckhand.schedule_add(text, jsonb, text, text, interval, boolean, boolean, timestamptz),
    deckhand.schedule_pause(text), deckhand.schedule_resume(text, timestamptz), deckhand.schedule_remove(text)
    TO deckhand_submitter, deckhand_worker;
GRANT EXECUTE ON FUNCTION deckhand.may_submit(text), deckhand.schedule_for_control(text, text) TO deckhand_worker;

-- Progress of running statements. While a task runs, its worker samples the node's
-- pg_stat_progress_* views for the attempt's backend, in a session as the task's owner (who
-- sees the progress of its own backends only), and records the latest sample here, tagged
-- with the attempt's token: a sample of an earlier attempt never shows for a later one.
-- {"token": 88, "command": "CREATE INDEX", "phase": "building index: scanning table",
--  "done": 1200, "total": 5000, "unit": "blocks", "sampled_at": "..."}
ALTER TABLE deckhand.task ADD COLUMN progress jsonb;

CREATE VIEW deckhand.task_progress WITH (security_barrier) AS
    SELECT t.id AS task_id, t.job_id, t.name AS task_name, t.progress ->> 'command' AS command,
           t.progress ->> 'phase' AS phase, (t.progress ->> 'done')::bigint AS done,
           (t.progress ->> 'total')::bigint AS total, t.progress ->> 'unit' AS unit,
           (t.progress ->> 'sampled_at')::timestamptz AS sampled_at
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE t.state IN ('running', 'cancelling') AND t.progress IS NOT NULL
      AND t.progress -> 'token' = to_jsonb(t.attempt_token)
      AND ((SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners))
    UNION ALL
    -- An export's coordinator reports its parts: written of planned, and the bytes so far.
    SELECT t.id, t.job_id, t.name, 'EXPORT',
           format('writing parts (%s written)', pg_size_pretty(p.bytes)), p.done, e.parts_total::bigint, 'parts', now()
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    JOIN deckhand.task t ON t.job_id = e.job_id AND t.kind = 'export' AND t.state IN ('running', 'cancelling')
    CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE q.finished_at IS NOT NULL) AS done, coalesce(sum(q.bytes), 0) AS bytes
                        FROM deckhand.export_part q WHERE q.export_id = e.id AND q.epoch = e.epoch) p
    WHERE e.parts_total > 0 AND e.state NOT IN ('committed', 'superseded')
      AND ((SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners));
REVOKE ALL ON deckhand.task_progress FROM PUBLIC;
GRANT SELECT ON deckhand.task_progress TO deckhand_submitter, deckhand_worker;
