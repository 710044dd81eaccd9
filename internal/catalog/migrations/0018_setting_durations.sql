-- Duration settings are accepted exactly when the workers read them as a positive duration.
-- go_duration_ms summed exact fractions, but Go's time.ParseDuration counts whole nanoseconds,
-- dropping each part's fraction of one: '0.5ns' (or '0.0001us') passed the check as a
-- positive duration and the workers, reading 0, silently took the default. It now counts as
-- Go does; its result is still in milliseconds, a whole number of nanoseconds. The limits are
-- those of what the workers compute: Go's durations (2^63-1 ns) for retention, and
-- PostgreSQL's longest lock_timeout in whole milliseconds (what the cleaner sets) for
-- cleanup_lock_timeout. Values longer than 1000 characters are refused rather than read into
-- numbers numeric cannot hold. Like the catalog's other helpers, the function is not PUBLIC's.
CREATE OR REPLACE FUNCTION deckhand.go_duration_ms(s text) RETURNS numeric
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

-- set_setting as in 0017_setting_values.sql, with the limits above.
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
            -- Go's durations end at 2^63-1 nanoseconds, about 292 years.
            IF ms IS NULL OR ms <= 0 OR ms * 1000000 > 9223372036854775807 THEN
                PERFORM deckhand.input_error(format('setting retention: %L is not a positive duration such as 168h, 30m or 1h30m', value));
            END IF;
        WHEN 'cleanup_lock_timeout' THEN
            ms := deckhand.go_duration_ms(value);
            IF ms IS NULL OR ms <= 0 OR trunc(ms) > 2147483647 THEN
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
