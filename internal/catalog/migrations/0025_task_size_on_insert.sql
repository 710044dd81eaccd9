-- 0023 bounded a task's SQL and payload with CHECK constraints, NOT VALID so that the
-- upgrade would not fail on tasks written before it. But PostgreSQL checks every CHECK
-- constraint on every new row version, an UPDATE that leaves sql and payload alone included:
-- a task written before the upgrade with more than 16 MiB failed each write of its row (the
-- claim that takes it, its result, a cancel), and the claim it was in failed whole, every
-- time, so that nothing more was claimed on its node; the result of one running during the
-- upgrade was retried for ever, every other result of its worker held behind it.
-- A task's sql and payload never change after its insert (task_identity, 0004), so the bound
-- is checked where they are written, on INSERT alone; the rows already there run as they
-- were accepted.
ALTER TABLE deckhand.task
    DROP CONSTRAINT IF EXISTS task_sql_at_most_16_mib,
    DROP CONSTRAINT IF EXISTS task_payload_at_most_16_mib;

CREATE FUNCTION deckhand.refuse_huge_task() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = format('task %L: its sql and its payload are limited to 16 MiB each', NEW.name);
END $$;
REVOKE ALL ON FUNCTION deckhand.refuse_huge_task() FROM PUBLIC;

CREATE TRIGGER task_size BEFORE INSERT ON deckhand.task
    FOR EACH ROW WHEN (octet_length(NEW.sql) > 16777216
                       OR (NEW.payload IS NOT NULL AND octet_length(NEW.payload::text) > 16777216))
    EXECUTE FUNCTION deckhand.refuse_huge_task();
