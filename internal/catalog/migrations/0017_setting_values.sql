-- Values of the settings deckhand reads are checked when they are set. Before, set_setting
-- stored any text: max_running_tasks = 'abc' made every claim fail (the claim casts it to an
-- integer), so no worker ran anything until an admin noticed; a retention or
-- cleanup_lock_timeout that was not a duration was silently replaced by the default, and a
-- cleanup_lock_timeout above PostgreSQL's longest lock_timeout failed every removal. Other
-- names are stored as they are (programs that embed deckhand keep settings of their own).

-- go_duration_ms reads a Go duration ('90s', '1h30m', '250ms', '1.5h') as milliseconds;
-- NULL when s is not one. It accepts what Go's time.ParseDuration reads, but for a sign and
-- the units spelled with a micro sign (write us).
CREATE FUNCTION deckhand.go_duration_ms(s text) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m text[];
    total numeric := 0;
BEGIN
    IF s IS NULL OR s !~ '^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h))+$' THEN
        RETURN NULL;
    END IF;
    FOR m IN SELECT regexp_matches(s, '([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h)', 'g') LOOP
        total := total + m[1]::numeric * CASE m[2]
            WHEN 'ns' THEN 0.000001 WHEN 'us' THEN 0.001
            WHEN 'ms' THEN 1 WHEN 's' THEN 1000 WHEN 'm' THEN 60000 ELSE 3600000 END;
    END LOOP;
    RETURN total;
END $$;

-- set_setting as in 0004_security.sql, checking the values of the settings deckhand reads.
CREATE OR REPLACE FUNCTION deckhand.set_setting(name text, value text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ms numeric;
BEGIN
    PERFORM deckhand.require_admin('change settings');
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        PERFORM deckhand.input_error(format('setting %L: a setting name is a lower-case word', name));
    END IF;
    IF value IS NOT NULL THEN
        CASE name
        WHEN 'max_running_tasks', 'api_max_event_streams' THEN
            IF value !~ '^[0-9]{1,10}$' THEN
                PERFORM deckhand.input_error(format('setting %s: %L is not a whole number from 0 to 2147483647', name, value));
            ELSIF value::bigint > 2147483647 THEN
                PERFORM deckhand.input_error(format('setting %s: %L is not a whole number from 0 to 2147483647', name, value));
            END IF;
        WHEN 'retention' THEN
            ms := deckhand.go_duration_ms(value);
            -- Go's durations end at about 292 years.
            IF ms IS NULL OR ms <= 0 OR ms > 9223372036854 THEN
                PERFORM deckhand.input_error(format('setting retention: %L is not a positive duration such as 168h, 30m or 1h30m', value));
            END IF;
        WHEN 'cleanup_lock_timeout' THEN
            ms := deckhand.go_duration_ms(value);
            IF ms IS NULL OR ms <= 0 OR ms > 2147483647 THEN
                PERFORM deckhand.input_error(format('setting cleanup_lock_timeout: %L is not a positive duration such as 100ms or 2s, at most 2147483647ms (PostgreSQL''s longest lock_timeout)', value));
            END IF;
        ELSE
        END CASE;
    END IF;
    IF value IS NULL THEN
        DELETE FROM deckhand.setting s WHERE s.name = set_setting.name;
    ELSE
        INSERT INTO deckhand.setting AS s (name, value) VALUES (set_setting.name, set_setting.value)
        ON CONFLICT ON CONSTRAINT setting_pkey DO UPDATE SET value = EXCLUDED.value;
    END IF;
END $$;
