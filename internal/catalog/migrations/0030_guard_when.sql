-- The write guard (guard_writes, 0004_security.sql) fires once for every statement that
-- writes a catalog table, and workers, whose writes it always lets through, make nearly all of
-- them: a claim and a completion are several writing statements each. A call of the guard's
-- function costs a PL/pgSQL call and its search_path's save and restore every time. The
-- trigger's WHEN condition now lets a member of deckhand_worker through before any call:
-- evaluated as a plain expression, stored as a parsed tree (no name in it is looked up when it
-- runs). Everyone else reaches the function, which decides as before (the schema's owner
-- passes, the rest are refused). Who may write is unchanged.
DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT c.relname FROM pg_catalog.pg_trigger g
             JOIN pg_catalog.pg_class c ON c.oid = g.tgrelid
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'deckhand' AND g.tgname = 'guard_writes' LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER guard_writes ON deckhand.%I', t);
        EXECUTE pg_catalog.format('CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.%I
            FOR EACH STATEMENT WHEN (NOT pg_catalog.pg_has_role(CURRENT_USER, %L::pg_catalog.text, %L::pg_catalog.text))
            EXECUTE FUNCTION deckhand.guard_writes()', t, 'deckhand_worker', 'MEMBER');
    END LOOP;
END $$;
