-- deckhand catalog: roles, and the rule that nobody writes the catalog directly but workers.
--
-- Trust model (docs/security.md): every row may have been written by a hostile user unless the
-- catalog itself made that impossible. So submitters and admins hold no INSERT, UPDATE, DELETE
-- or TRUNCATE on any table: they call the SECURITY DEFINER functions below, which take the
-- caller's identity from session_user (SET ROLE does not change it) and enforce who may do
-- what. Workers (deckhand_worker) keep direct access: they run what the catalog holds, so they
-- are trusted like the catalog's owner.
--
-- Every function here runs with search_path = pg_catalog, pg_temp, so no object a caller
-- creates can stand in for one it uses.

-- Roles are cluster-wide and shared by every catalog of the cluster: create them only when
-- missing, tolerating another catalog's init creating them at the same moment.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['deckhand_submitter', 'deckhand_admin', 'deckhand_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
    -- Admins may do everything submitters may.
    IF NOT pg_catalog.pg_has_role('deckhand_admin', 'deckhand_submitter', 'MEMBER') THEN
        BEGIN
            GRANT deckhand_submitter TO deckhand_admin;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END $$;

-- The submitter of a job, the owner of each task and what each task runs never change once
-- written; neither does the role a cleanup operation removes as.
ALTER TABLE deckhand.job ADD COLUMN owners text[] NOT NULL DEFAULT '{}';
UPDATE deckhand.job j SET owners = ARRAY(SELECT DISTINCT t.owner FROM deckhand.task t WHERE t.job_id = j.id ORDER BY 1);
ALTER TABLE deckhand.operation ADD COLUMN submitted_by text;
UPDATE deckhand.operation o SET submitted_by = j.submitted_by FROM deckhand.job j WHERE j.id = o.job_id;

CREATE FUNCTION deckhand.refuse_identity_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'deckhand: % of % % cannot change once written', TG_ARGV[0], TG_TABLE_NAME, OLD.id
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER job_identity BEFORE UPDATE OF submitted_by, owners, search_path, settings ON deckhand.job
    FOR EACH ROW WHEN (OLD.submitted_by IS DISTINCT FROM NEW.submitted_by OR OLD.owners IS DISTINCT FROM NEW.owners
                       OR OLD.search_path IS DISTINCT FROM NEW.search_path OR OLD.settings IS DISTINCT FROM NEW.settings)
    EXECUTE FUNCTION deckhand.refuse_identity_change('submitter, owners and session context');
CREATE TRIGGER task_identity BEFORE UPDATE OF job_id, owner, kind, sql, payload, in_transaction ON deckhand.task
    FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id OR OLD.owner IS DISTINCT FROM NEW.owner
                       OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.sql IS DISTINCT FROM NEW.sql
                       OR OLD.payload IS DISTINCT FROM NEW.payload OR OLD.in_transaction IS DISTINCT FROM NEW.in_transaction)
    EXECUTE FUNCTION deckhand.refuse_identity_change('job, owner and work');
CREATE TRIGGER operation_identity BEFORE UPDATE OF job_id, owner, submitted_by ON deckhand.operation
    FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id OR OLD.owner IS DISTINCT FROM NEW.owner
                       OR OLD.submitted_by IS DISTINCT FROM NEW.submitted_by)
    EXECUTE FUNCTION deckhand.refuse_identity_change('job, owner and submitter');

-- Who the caller is. session_user is the role that logged in; SET ROLE and SECURITY DEFINER
-- functions leave it alone.

-- is_admin: a member of deckhand_admin, the owner of the catalog schema, or a superuser (who
-- is a member of every role).
CREATE FUNCTION deckhand.is_admin() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_has_role(session_user, 'deckhand_admin', 'MEMBER')
        OR EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'deckhand' AND nspowner = (SELECT oid FROM pg_roles WHERE rolname = session_user))
$$;

-- sees_all: admins and workers read every job.
CREATE FUNCTION deckhand.sees_all() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT deckhand.is_admin() OR pg_has_role(session_user, 'deckhand_worker', 'MEMBER')
$$;

-- member_of: the caller is a member of role, which exists in this cluster. Roles are matched by
-- name across the catalog's cluster and the nodes'; the nodes check membership again on their own.
CREATE FUNCTION deckhand.member_of(role text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role)
                THEN pg_has_role(session_user, role::name, 'MEMBER') ELSE false END
$$;

-- may_act_on: the caller may see, cancel and retry a job: its submitter, a member of every
-- owner of its tasks, or an admin (workers too, for reading).
CREATE FUNCTION deckhand.may_act_on(submitted_by text, owners text[]) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT submitted_by = session_user
        OR deckhand.sees_all()
        OR (cardinality(owners) > 0 AND NOT EXISTS (SELECT 1 FROM unnest(owners) o WHERE NOT deckhand.member_of(o)))
$$;

-- redact hides password=... style secrets and URL passwords in text that is stored and shown
-- (descriptions, errors). deckhand refuses secrets where it takes conninfo and URLs; this
-- guards what other programs quote back, such as an error naming a connection string.
CREATE FUNCTION deckhand.redact(s text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT regexp_replace(
               regexp_replace(s, '([a-z][a-z0-9+.-]*://[^:/@\s]*):[^@/\s]*@', '\1:REDACTED@', 'gi'),
               '\m((ssl)?pass(word)?|secret|(access_)?token|aws_secret_access_key)(\s*=\s*)(''([^''\\]|\\.)*''?|[^\s&]*)',
               '\1\5REDACTED', 'gi')
$$;
