-- A job's settings go, with each of its tasks that a worker claims, into the memory of that
-- worker and of the catalog backend that answers the claim: a claim of 32 tasks of a job
-- whose settings are 200 MB held 6 GB. 0023 bounded a task's SQL and payload; deckhand.submit
-- took settings of any size from psql. The names and values of a job's settings may now add
-- up to 1 MiB, far more than any set of PostgreSQL settings a person writes; clients refuse
-- the same before writing (spec.MaxJobSettings). Like 0025, the bound is checked where the
-- settings are written, on INSERT: they never change afterwards (job_identity, 0004), and the
-- jobs already there run as they were accepted.
CREATE FUNCTION deckhand.refuse_huge_settings() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (SELECT coalesce(sum(octet_length(s.key) + octet_length(s.value)), 0)
        FROM jsonb_each_text(NEW.settings) s) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'the names and values of a job''s settings are limited to 1 MiB';
    END IF;
    RETURN NEW;
END $$;
REVOKE ALL ON FUNCTION deckhand.refuse_huge_settings() FROM PUBLIC;

-- The text of a jsonb object is never shorter than its keys and values: only large settings
-- are counted.
CREATE TRIGGER job_settings_size BEFORE INSERT ON deckhand.job
    FOR EACH ROW WHEN (jsonb_typeof(NEW.settings) = 'object' AND octet_length(NEW.settings::text) > 1048576)
    EXECUTE FUNCTION deckhand.refuse_huge_settings();
