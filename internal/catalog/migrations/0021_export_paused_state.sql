-- deckhand.exports showed a paused export as 'running' although nothing of it ran and its
-- coordinator had released the partition's lock. An export whose job is paused now shows
-- 'paused' (and 'running' again after the resume). Everything else is as in
-- 0019_visibility_once.sql.
CREATE OR REPLACE VIEW deckhand.exports WITH (security_barrier) AS
    SELECT e.id, e.job_id, e.source_table, e.partition, e.node_group, e.destination,
           CASE WHEN e.state IN ('committed', 'superseded') THEN e.state
                WHEN j.state IN ('failed', 'failing') THEN 'failed'
                WHEN j.state IN ('cancelled', 'cancelling') THEN 'cancelled'
                WHEN j.state = 'paused' THEN 'paused'
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
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    WHERE (SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles()));
