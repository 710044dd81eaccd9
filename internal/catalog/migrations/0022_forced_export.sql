-- A forced export supersedes what its destination held, and readers trust the manifest found
-- there. Under a prefix of export_destinations that several submitters share, --force let any
-- of them replace another's export with rows of its choosing. deckhand.submit_export is the
-- only writer of new export rows, so this trigger, which runs inside it, holds a forced
-- export to destinations whose catalog exports (committed, or under way) the caller may act
-- on: its own, those of roles it is a member of, or any for an admin. An export that failed
-- or was cancelled holds nothing.
CREATE FUNCTION deckhand.refuse_foreign_force() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    other bigint;
BEGIN
    IF deckhand.is_admin() THEN
        RETURN NEW;
    END IF;
    SELECT e.id INTO other
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    WHERE e.destination = NEW.destination AND e.job_id <> NEW.job_id
      AND (e.state = 'committed'
           OR (e.state IN ('planning', 'running') AND j.state NOT IN ('failed', 'failing', 'cancelled', 'cancelling')))
      AND NOT deckhand.may_act_on(j.submitted_by, j.owners)
    ORDER BY e.id DESC LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('%s may not force an export over export %s at this destination: only who may act on that export, or a deckhand admin, may replace it',
                             session_user, other);
    END IF;
    RETURN NEW;
END $$;
REVOKE ALL ON FUNCTION deckhand.refuse_foreign_force() FROM PUBLIC;

CREATE TRIGGER export_force BEFORE INSERT ON deckhand.export
    FOR EACH ROW WHEN (NEW.forced) EXECUTE FUNCTION deckhand.refuse_foreign_force();
