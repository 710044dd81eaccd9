-- A move's mark is not a placement. A placement says where a schema (or a table) lives, and
-- only a move's switch at cut-over writes one: a move that fails or is cancelled leaves the
-- placements exactly as they were. Until now a move that began recorded its objects as placed
-- on its source when the catalog had no placement for them (job_id NULL), before anything was
-- copied; such a row could name a group that holds another tenant's schema of the same name,
-- and it outlived a failed move.
--
-- A row of deckhand.placement is now either a placement (node_group and job_id set, the
-- switch that put it there), possibly marked by the move under way, or a mark alone (a move
-- under way of an object with no placement: node_group and job_id NULL). deckhand.placements
-- shows placements only; deckhand.placement_moves shows the moves under way, placed or not.

ALTER TABLE deckhand.placement ALTER COLUMN node_group DROP NOT NULL;

-- Rows recorded where a move began: a mark alone while that move is under way, else nothing.
UPDATE deckhand.placement p SET node_group = NULL, version = nextval('deckhand.placement_version_seq')
WHERE p.job_id IS NULL AND p.moving_job_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id AND j.state NOT IN ('finished', 'failed', 'cancelled'));
DELETE FROM deckhand.placement WHERE job_id IS NULL AND node_group IS NOT NULL;
-- Marks alone of moves that have ended hold nothing.
DELETE FROM deckhand.placement p WHERE p.node_group IS NULL
  AND NOT EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id AND j.state NOT IN ('finished', 'failed', 'cancelled'));

ALTER TABLE deckhand.placement
    ADD CONSTRAINT placement_placed_by_a_switch CHECK ((node_group IS NULL) = (job_id IS NULL)),
    ADD CONSTRAINT placement_placed_or_marked CHECK (node_group IS NOT NULL OR moving_job_id IS NOT NULL);

-- Placements only: a mark alone is no placement, and routers must never read it as one.
CREATE OR REPLACE VIEW deckhand.placements WITH (security_barrier) AS
    SELECT p.schema_name, p.table_name, p.node_group, p.since, p.job_id,
           m.moving_job_id, m.moving_to, p.version
    FROM deckhand.placement p
    CROSS JOIN LATERAL (
        SELECT CASE WHEN live THEN p.moving_job_id END AS moving_job_id,
               CASE WHEN live THEN p.moving_to END AS moving_to
        FROM (SELECT EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                             AND j.state NOT IN ('finished', 'failed', 'cancelled')) AS live) l
    ) m
    WHERE p.node_group IS NOT NULL;

-- The moves under way, of placed objects or not: what `deckhand move` and `deckhand rebalance`
-- leave alone. Shown to every catalog role, as the placements' own marks always were.
CREATE VIEW deckhand.placement_moves WITH (security_barrier) AS
    SELECT p.schema_name, p.table_name, p.moving_job_id, p.moving_to
    FROM deckhand.placement p
    WHERE p.moving_job_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                  AND j.state NOT IN ('finished', 'failed', 'cancelled'));
REVOKE ALL ON deckhand.placement_moves FROM PUBLIC;
GRANT SELECT ON deckhand.placement_moves TO deckhand_submitter, deckhand_worker;
