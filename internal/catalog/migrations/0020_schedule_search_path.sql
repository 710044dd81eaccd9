-- deckhand.schedule_add from psql kept the search_path of its own session with a spec that
-- names none: current_setting('search_path') inside a function that sets search_path is the
-- function's (pg_catalog, pg_temp), so the schedule's jobs found none of the caller's tables.
-- The caller's search_path is now an argument whose default is read in the caller's session,
-- before the function's own setting applies. Everything else is as in 0012_schedules.sql.
DROP FUNCTION deckhand.schedule_add(text, jsonb, text, text, interval, boolean, boolean, timestamptz);

CREATE FUNCTION deckhand.schedule_add(name text, spec jsonb, cron text DEFAULT NULL, timezone text DEFAULT NULL,
                                      every interval DEFAULT NULL,
                                      skip_missed boolean DEFAULT false, no_overlap boolean DEFAULT false,
                                      next_run_at timestamptz DEFAULT NULL,
                                      caller_search_path text DEFAULT pg_catalog.current_setting('search_path')) RETURNS bigint
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
    IF coalesce(normalized ->> 'search_path', '') = '' AND coalesce(caller_search_path, '') <> '' THEN
        IF length(caller_search_path) > 10000 THEN
            PERFORM deckhand.input_error('search_path is limited to 10000 characters');
        END IF;
        normalized := normalized || jsonb_build_object('search_path', caller_search_path);
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
REVOKE ALL ON FUNCTION deckhand.schedule_add(text, jsonb, text, text, interval, boolean, boolean, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.schedule_add(text, jsonb, text, text, interval, boolean, boolean, timestamptz, text)
    TO deckhand_submitter, deckhand_worker;
