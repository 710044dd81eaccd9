-- Tasks that target a node group: runnable on any member whose WAL replay has passed min_lsn.
-- node stays NULL until a claim picks the member; it is cleared again when the task returns
-- to the queue, so a retry may run elsewhere.
ALTER TABLE deckhand.task ADD COLUMN node_group text, ADD COLUMN min_lsn pg_lsn;
CREATE INDEX task_runnable_group_idx ON deckhand.task (node_group, id)
    WHERE state = 'runnable' AND node_group IS NOT NULL;
-- Keep the two queues apart, so that a scan for one never wades through the other.
DROP INDEX deckhand.task_runnable_idx;
CREATE INDEX task_runnable_idx ON deckhand.task (node, id) WHERE state = 'runnable' AND node_group IS NULL;

-- A task may add tasks to its own job (an export's coordinator adds its parts); the added
-- tasks record who added them.
ALTER TABLE deckhand.task ADD COLUMN added_by bigint;

CREATE TABLE deckhand.export (
    id               bigserial PRIMARY KEY,
    job_id           bigint NOT NULL REFERENCES deckhand.job (id) ON DELETE CASCADE,
    source_table     text NOT NULL,      -- the partitioned (or plain) table, as given
    partition        text NOT NULL,      -- the leaf exported, as given
    node_group       text NOT NULL,
    destination      text NOT NULL,      -- URL of the export's directory
    compression      text NOT NULL,
    part_size        bigint NOT NULL,    -- bytes of heap per part
    forced           boolean NOT NULL DEFAULT false,
    -- planning → running → committed; failed and cancelled follow the job (see the view).
    state            text NOT NULL DEFAULT 'planning'
        CHECK (state IN ('planning', 'running', 'committed', 'failed', 'superseded')),
    epoch            int NOT NULL DEFAULT 0, -- bumped whenever the consistency point is taken anew
    consistency_lsn  pg_lsn,
    coordinator_token bigint,            -- attempt token of the coordinator holding the point
    parts_total      int NOT NULL DEFAULT 0,
    columns          jsonb,
    manifest_url     text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    planned_at       timestamptz,
    finished_at      timestamptz
);
CREATE INDEX export_destination_idx ON deckhand.export (destination, partition);
CREATE INDEX export_job_idx ON deckhand.export (job_id);

CREATE TABLE deckhand.export_part (
    export_id   bigint NOT NULL REFERENCES deckhand.export (id) ON DELETE CASCADE,
    epoch       int NOT NULL,
    part        int NOT NULL,
    start_page  bigint NOT NULL,
    end_page    bigint,                  -- NULL: to the end of the table
    task_id     bigint,
    object_key  text NOT NULL,
    node        text,
    rows        bigint,
    bytes       bigint,
    sha256      text,
    finished_at timestamptz,
    PRIMARY KEY (export_id, epoch, part)
);

CREATE VIEW deckhand.exports AS
    SELECT e.id, e.job_id, e.source_table, e.partition, e.node_group, e.destination,
           CASE WHEN e.state IN ('committed', 'superseded') THEN e.state
                WHEN j.state IN ('failed', 'failing') THEN 'failed'
                WHEN j.state IN ('cancelled', 'cancelling') THEN 'cancelled'
                ELSE e.state END AS state,
           e.parts_total,
           (SELECT count(*) FROM deckhand.export_part p
             WHERE p.export_id = e.id AND p.epoch = e.epoch AND p.finished_at IS NOT NULL) AS parts_done,
           (SELECT coalesce(sum(p.rows), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS rows,
           (SELECT coalesce(sum(p.bytes), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS bytes,
           ARRAY(SELECT t.name || ': ' || (t.last_error ->> 'message')
                 FROM deckhand.task t
                 WHERE t.job_id = e.job_id AND t.last_error IS NOT NULL ORDER BY t.id) AS errors,
           e.consistency_lsn, e.epoch, e.compression, e.part_size, e.forced, e.manifest_url, e.error,
           e.created_at, e.planned_at, e.finished_at, e.columns
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id;
