-- Placements: which node group holds a tenant schema, or a table of it, and which job is moving
-- it now. Routers read them (deckhand.placements) to send each tenant's queries to its group;
-- moves mark what they move (one job at a time per object) and switch the placement at cut-over.
--
-- A row with table_name NULL places a whole schema; a row with a table name places that table,
-- apart from its schema's row. Only workers write the table (a move's executor, through
-- internal/catalog/placements.go); everybody with catalog access reads the view.

CREATE SEQUENCE deckhand.placement_version_seq;

CREATE TABLE deckhand.placement (
    id            bigserial PRIMARY KEY,
    schema_name   text NOT NULL CHECK (schema_name <> ''),
    table_name    text CHECK (table_name <> ''),       -- NULL: the whole schema
    node_group    text NOT NULL,                       -- where it lives now
    since         timestamptz NOT NULL DEFAULT now(),  -- since when it lives there
    job_id        bigint,                              -- the move that put it there; NULL: recorded when a move began
    moving_job_id bigint,                              -- the job moving it now (see deckhand.placements for stale marks)
    moving_to     text,                                -- that job's target group
    -- Every write takes the next version: a listener that heard version N re-reads the rows
    -- above the version it has.
    version       bigint NOT NULL DEFAULT nextval('deckhand.placement_version_seq'),
    CHECK ((moving_job_id IS NULL) = (moving_to IS NULL)),
    UNIQUE NULLS NOT DISTINCT (schema_name, table_name)
);
CREATE INDEX placement_moving_idx ON deckhand.placement (moving_job_id) WHERE moving_job_id IS NOT NULL;

-- Any change of a placement is announced on channel deckhand_placement. Any role that may
-- connect to the catalog's database may LISTEN there, so the payload names nothing (see
-- docs/security.md): it is the highest placement version, and listeners read the view, which
-- only catalog roles may.
CREATE FUNCTION deckhand.notify_placement() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('deckhand_placement',
        (SELECT coalesce(max(version), 0) FROM deckhand.placement)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER placement_notify AFTER INSERT OR UPDATE OR DELETE ON deckhand.placement
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.notify_placement();
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.placement
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

-- Placements say where data lives, which every router needs: the view shows every row to every
-- catalog role. A moving mark whose job has ended (or is gone) no longer holds anything and
-- shows as none.
CREATE VIEW deckhand.placements WITH (security_barrier) AS
    SELECT p.schema_name, p.table_name, p.node_group, p.since, p.job_id,
           m.moving_job_id, m.moving_to, p.version
    FROM deckhand.placement p
    CROSS JOIN LATERAL (
        SELECT CASE WHEN live THEN p.moving_job_id END AS moving_job_id,
               CASE WHEN live THEN p.moving_to END AS moving_to
        FROM (SELECT EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                             AND j.state NOT IN ('finished', 'failed', 'cancelled')) AS live) l
    ) m;

REVOKE ALL ON deckhand.placement, deckhand.placements FROM PUBLIC;
REVOKE ALL ON SEQUENCE deckhand.placement_version_seq, deckhand.placement_id_seq FROM PUBLIC;
REVOKE ALL ON FUNCTION deckhand.notify_placement() FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.placement TO deckhand_worker;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE deckhand.placement_version_seq, deckhand.placement_id_seq TO deckhand_worker;
GRANT EXECUTE ON FUNCTION deckhand.notify_placement() TO deckhand_worker;
GRANT SELECT ON deckhand.placements TO deckhand_submitter, deckhand_worker;

-- The moves of rebalances (jobs of kind rebalance, whose tasks are moves), with the bytes each
-- was planned to move, for `deckhand rebalance status`: to each role the jobs it may act on,
-- as deckhand.tasks shows them. The payload is the submitter's: a bytes field that is not a
-- plain count reads as 0 rather than failing everyone's reads.
CREATE VIEW deckhand.rebalance_moves WITH (security_barrier) AS
    SELECT t.job_id, t.id AS task_id, t.name, t.state,
           t.payload ->> 'schema' AS schema_name, t.payload ->> 'from' AS from_group, t.payload ->> 'to' AS to_group,
           CASE WHEN jsonb_typeof(t.payload -> 'bytes') = 'number' AND (t.payload ->> 'bytes') ~ '^[0-9]{1,18}$'
                THEN (t.payload ->> 'bytes')::bigint ELSE 0 END AS bytes,
           t.started_at, t.finished_at, t.last_error ->> 'message' AS last_error
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE j.kind = 'rebalance' AND t.kind = 'move'
      AND ((SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners));
-- The latest rebalance is found without reading the jobs before it.
CREATE INDEX job_rebalance_idx ON deckhand.job (id) WHERE kind = 'rebalance';
REVOKE ALL ON deckhand.rebalance_moves FROM PUBLIC;
GRANT SELECT ON deckhand.rebalance_moves TO deckhand_submitter, deckhand_worker;
