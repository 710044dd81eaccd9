-- Values of the settings deckhand reads are checked when they are set, by one function,
-- setting_problem; values stored before are respelled or removed (below). Before, set_setting
-- stored any text: max_running_tasks = 'abc' made every claim fail (the claim casts it to an
-- integer), so no worker ran anything until an admin noticed; a retention or
-- cleanup_lock_timeout that was not a duration was silently replaced by the default, and a
-- cleanup_lock_timeout above PostgreSQL's longest lock_timeout failed every removal. Other
-- names are stored as they are (programs that embed deckhand keep settings of their own).

-- go_duration_ms reads a Go duration ('90s', '1h30m', '250ms', '1.5h') as milliseconds, as
-- the workers read it with time.ParseDuration, which counts whole nanoseconds per part and
-- drops the rest ('0.5ns' is 0); NULL when s is not one. It takes what ParseDuration takes but
-- a sign and the units spelled with a micro sign (write us). The limits set_setting applies
-- are those of what the workers compute: Go's durations (2^63-1 ns) for retention, and
-- PostgreSQL's longest lock_timeout in whole milliseconds (what the cleaner sets) for
-- cleanup_lock_timeout. Values longer than 1000 characters are refused rather than read into
-- numbers numeric cannot hold.
CREATE FUNCTION deckhand.go_duration_ms(s text) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m text[];
    ns numeric := 0;
BEGIN
    IF s IS NULL OR length(s) > 1000 OR s !~ '^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h))+$' THEN
        RETURN NULL;
    END IF;
    FOR m IN SELECT regexp_matches(s, '([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h)', 'g') LOOP
        ns := ns + trunc(m[1]::numeric * CASE m[2]
            WHEN 'ns' THEN 1 WHEN 'us' THEN 1000 WHEN 'ms' THEN 1000000
            WHEN 's' THEN 1000000000 WHEN 'm' THEN 60000000000 ELSE 3600000000000 END);
    END LOOP;
    RETURN ns * 0.000001; -- exact, where division would round
END $$;
REVOKE ALL ON FUNCTION deckhand.go_duration_ms(text) FROM PUBLIC;

-- setting_problem says why value is no value of setting name, in one line, or NULL when it is
-- one; only the settings deckhand reads are checked.
CREATE FUNCTION deckhand.setting_problem(name text, value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ms numeric;
BEGIN
    CASE name
    WHEN 'max_running_tasks', 'api_max_event_streams' THEN
        -- Two tests, so that the cast is made only of digits.
        IF value !~ '^[0-9]{1,10}$' THEN
            RETURN format('setting %s: %L is not a whole number from 0 to 2147483647', name, value);
        ELSIF value::bigint > 2147483647 THEN
            RETURN format('setting %s: %L is not a whole number from 0 to 2147483647', name, value);
        END IF;
    WHEN 'retention' THEN
        ms := deckhand.go_duration_ms(value);
        -- Go's durations end at 2^63-1 nanoseconds, about 292 years.
        IF ms IS NULL OR ms <= 0 OR ms * 1000000 > 9223372036854775807 THEN
            RETURN format('setting retention: %L is not a positive duration such as 168h, 30m or 1h30m', value);
        END IF;
    WHEN 'cleanup_lock_timeout' THEN
        ms := deckhand.go_duration_ms(value);
        IF ms IS NULL OR ms <= 0 OR trunc(ms) > 2147483647 THEN
            RETURN format('setting cleanup_lock_timeout: %L is not a positive duration such as 100ms or 2s, at most 2147483647ms (PostgreSQL''s longest lock_timeout)', value);
        END IF;
    ELSE
    END CASE;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION deckhand.setting_problem(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION deckhand.set_setting(name text, value text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    problem text;
BEGIN
    PERFORM deckhand.require_admin('change settings');
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM deckhand.input_error(format('setting %L: a setting name is a lower-case word', name));
    END IF;
    IF value IS NULL THEN
        DELETE FROM deckhand.setting s WHERE s.name = set_setting.name;
        RETURN;
    END IF;
    problem := deckhand.setting_problem(name, value);
    IF problem IS NOT NULL THEN
        PERFORM deckhand.input_error(problem);
    END IF;
    INSERT INTO deckhand.setting AS s (name, value) VALUES (set_setting.name, set_setting.value)
    ON CONFLICT ON CONSTRAINT setting_pkey DO UPDATE SET value = EXCLUDED.value;
END $$;

-- Values stored before set_setting checked them: those the workers read, in a spelling
-- set_setting does not take, are respelled first: the claim's cast to integer takes spaces
-- around the number and a sign, Go's strconv.Atoi a sign, Go's time.ParseDuration a sign and
-- the micro sign.
UPDATE deckhand.setting s SET value = s.value::bigint::text
 WHERE s.name = 'max_running_tasks' AND deckhand.setting_problem(s.name, s.value) IS NOT NULL
   AND s.value ~ '^[[:space:]]*\+?[0-9]{1,18}[[:space:]]*$';
UPDATE deckhand.setting s SET value = s.value::bigint::text
 WHERE s.name = 'api_max_event_streams' AND deckhand.setting_problem(s.name, s.value) IS NOT NULL
   AND s.value ~ '^\+?[0-9]{1,18}$';
-- (The micro signs, U+00B5 and U+03BC, are written as regular expression escapes: this file
-- stays ASCII for catalogs in any encoding.)
UPDATE deckhand.setting s SET value = regexp_replace(regexp_replace(s.value, '^\+', ''), '(\u00b5|\u03bc)s', 'us', 'g')
 WHERE s.name IN ('retention', 'cleanup_lock_timeout') AND deckhand.setting_problem(s.name, s.value) IS NOT NULL;
-- What is still refused no worker reads.
DELETE FROM deckhand.setting s WHERE deckhand.setting_problem(s.name, s.value) IS NOT NULL;
