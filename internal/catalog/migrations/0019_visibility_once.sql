-- Who may see a job, decided once per statement rather than once per row.
--
-- The views asked deckhand.may_act_on(submitted_by, owners) of every row they read. Each call
-- is a SECURITY DEFINER function that calls others (sees_all, is_admin, member_of), each
-- switching search_path on the way in and out: about 0.2 ms a row. An admin's reads skip it
-- ((SELECT deckhand.sees_all()) is asked once), but a submitter's do not: listing jobs, for a
-- submitter who may see few of them, called it for every job of the catalog, some twenty
-- seconds for 100,000 jobs, at each dashboard refresh of any submitter.
--
-- member_roles is asked once per statement (an uncorrelated subquery is an init plan): the
-- roles the caller is a member of, which exist in this cluster. A row is then visible, as
-- before, to its submitter, to admins and workers, and to a member of every owner of the job
-- (member_of each owner: the role exists and session_user is a member of it), now by comparing
-- arrays. may_act_on stays, for the functions that check one job.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION deckhand.member_roles() RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(array_agg(r.rolname::text ORDER BY r.rolname), '{}')
    FROM pg_roles r WHERE pg_has_role(session_user, r.oid, 'MEMBER')
$$;
REVOKE ALL ON FUNCTION deckhand.member_roles() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.member_roles() TO deckhand_submitter, deckhand_worker;

-- The views as they were (0013_job_tally.sql, 0004_security.sql, 0009_placements.sql,
-- 0012_schedules.sql), with may_act_on written out against member_roles.
CREATE OR REPLACE VIEW deckhand.jobs WITH (security_barrier) AS
    SELECT j.id, j.description, j.kind, j.submitted_by, j.state, j.tasks_total,
           j.tasks_done + coalesce(y.done, 0)::int AS tasks_done,
           j.tasks_failed, j.tasks_cancelled, j.tasks_unscheduled,
           j.tasks_total - j.tasks_done - coalesce(y.done, 0)::int - j.tasks_failed - j.tasks_cancelled - j.tasks_unscheduled
               AS tasks_pending,
           j.created_at, j.started_at, j.finished_at, j.finished_at - j.created_at AS duration, j.cancel_requested_at,
           j.notify_key, j.key, j.paused_at, j.priority
    FROM deckhand.job j
    LEFT JOIN (SELECT t.job_id, sum(t.done) AS done FROM deckhand.job_tally t GROUP BY t.job_id) y ON y.job_id = j.id
    WHERE (SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles()))
    -- A security_barrier view is planned apart from the query that reads it: without an order
    -- of its own, the first page of jobs (ORDER BY id DESC LIMIT 50, every job below the
    -- cursor) read and sorted every job; with it, the page walks the primary key backwards.
    ORDER BY j.id DESC;

CREATE OR REPLACE VIEW deckhand.tasks WITH (security_barrier) AS
    SELECT t.id, t.job_id, t.name, t.kind, t.node, t.owner, t.state, t.attempts, t.max_attempts, t.runs,
           t.not_before, t.worker_id, t.started_at, t.finished_at, t.timeout, t.in_transaction,
           t.last_error ->> 'sqlstate' AS last_sqlstate, t.last_error ->> 'message' AS last_error,
           ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                 WHERE d.task_id = t.id ORDER BY p.name) AS depends_on,
           t.sql,
           t.last_error AS error, -- the whole error: sqlstate, message, detail, hint
           ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                 WHERE d.task_id = t.id ORDER BY p.id) AS depends_on_in_order
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE (SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles()));

CREATE OR REPLACE VIEW deckhand.task_attempts WITH (security_barrier) AS
    SELECT a.task_id, t.job_id, t.name AS task_name, a.attempt, a.token, a.worker_id, a.outcome,
           a.started_at, a.finished_at, a.sqlstate, a.message, a.detail, a.hint
    FROM deckhand.task_attempt a JOIN deckhand.task t ON t.id = a.task_id JOIN deckhand.job j ON j.id = t.job_id
    WHERE (SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles()))
    UNION ALL
    SELECT t.id, t.job_id, t.name, t.runs, t.attempt_token, t.worker_id, t.state,
           t.started_at, NULL, NULL, NULL, NULL, NULL
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE t.state IN ('running', 'cancelling')
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())));

CREATE OR REPLACE VIEW deckhand.exports WITH (security_barrier) AS
    SELECT e.id, e.job_id, e.source_table, e.partition, e.node_group, e.destination,
           CASE WHEN e.state IN ('committed', 'superseded') THEN e.state
                WHEN j.state IN ('failed', 'failing') THEN 'failed'
                WHEN j.state IN ('cancelled', 'cancelling') THEN 'cancelled'
                -- None of its parts runs and its coordinator has let the partition go.
                WHEN j.state = 'paused' THEN 'paused'
                ELSE e.state END AS state,
           e.parts_total,
           (SELECT count(*) FROM deckhand.export_part p
             WHERE p.export_id = e.id AND p.epoch = e.epoch AND p.finished_at IS NOT NULL) AS parts_done,
           (SELECT coalesce(sum(p.rows), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS rows,
           (SELECT coalesce(sum(p.bytes), 0) FROM deckhand.export_part p WHERE p.export_id = e.id AND p.epoch = e.epoch) AS bytes,
           -- A cancelled task's error (a part superseded by a later consistency point, or the
           -- job's cancel) is no error of the export.
           ARRAY(SELECT t.name || ': ' || (t.last_error ->> 'message')
                 FROM deckhand.task t
                 WHERE t.job_id = e.job_id AND t.last_error IS NOT NULL AND t.state <> 'cancelled' ORDER BY t.id) AS errors,
           e.consistency_lsn, e.epoch, e.compression, e.part_size, e.forced, e.manifest_url, e.error,
           e.created_at, e.planned_at, e.finished_at, e.columns
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    WHERE (SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles()));

CREATE OR REPLACE VIEW deckhand.rebalance_moves WITH (security_barrier) AS
    SELECT t.job_id, t.id AS task_id, t.name, t.state,
           t.payload ->> 'schema' AS schema_name, t.payload ->> 'from' AS from_group, t.payload ->> 'to' AS to_group,
           CASE WHEN jsonb_typeof(t.payload -> 'bytes') = 'number' AND (t.payload ->> 'bytes') ~ '^[0-9]{1,18}$'
                THEN (t.payload ->> 'bytes')::bigint ELSE 0 END AS bytes,
           t.started_at, t.finished_at, t.last_error ->> 'message' AS last_error
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE j.kind = 'rebalance' AND t.kind = 'move'
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())));

CREATE OR REPLACE VIEW deckhand.schedules WITH (security_barrier) AS
    SELECT s.id, s.name, s.submitted_by, s.owners,
           CASE WHEN s.cron IS NOT NULL THEN 'cron ' || s.cron || ' ' || coalesce(s.timezone, 'UTC')
                ELSE 'every ' || s.every::text END AS timing,
           s.cron, s.timezone, s.every, s.skip_missed, s.no_overlap, s.paused,
           format('%s task%s%s', jsonb_array_length(s.spec -> 'tasks'),
                  CASE WHEN jsonb_array_length(s.spec -> 'tasks') = 1 THEN '' ELSE 's' END,
                  coalesce(': ' || nullif(s.spec ->> 'description', ''), '')) AS spec_summary,
           CASE WHEN s.paused OR s.next_run_at = 'infinity' THEN NULL ELSE s.next_run_at END AS next_run_at,
           s.last_due_at, s.last_outcome, s.last_error, s.last_job_id, j.state AS last_job_state,
           s.created_at, s.spec
    FROM deckhand.schedule s LEFT JOIN deckhand.job j ON j.id = s.last_job_id
    WHERE (SELECT deckhand.sees_all()) OR s.submitted_by = session_user OR (cardinality(s.owners) > 0 AND s.owners <@ (SELECT deckhand.member_roles()));

CREATE OR REPLACE VIEW deckhand.schedule_runs WITH (security_barrier) AS
    SELECT r.schedule_id, s.name AS schedule, r.due_at, r.outcome, r.missed, r.job_id, j.state AS job_state,
           r.error, r.fired_at
    FROM deckhand.schedule_run r JOIN deckhand.schedule s ON s.id = r.schedule_id
    LEFT JOIN deckhand.job j ON j.id = r.job_id
    WHERE (SELECT deckhand.sees_all()) OR s.submitted_by = session_user OR (cardinality(s.owners) > 0 AND s.owners <@ (SELECT deckhand.member_roles()));

CREATE OR REPLACE VIEW deckhand.job_schedules WITH (security_barrier) AS
    SELECT j.id AS job_id, j.schedule_id, s.name AS schedule,
           (SELECT r.due_at FROM deckhand.schedule_run r WHERE r.schedule_id = j.schedule_id AND r.job_id = j.id) AS due_at
    FROM deckhand.job j LEFT JOIN deckhand.schedule s ON s.id = j.schedule_id
    WHERE j.schedule_id IS NOT NULL
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())));

CREATE OR REPLACE VIEW deckhand.task_progress WITH (security_barrier) AS
    SELECT t.id AS task_id, t.job_id, t.name AS task_name, t.progress ->> 'command' AS command,
           t.progress ->> 'phase' AS phase, (t.progress ->> 'done')::bigint AS done,
           (t.progress ->> 'total')::bigint AS total, t.progress ->> 'unit' AS unit,
           (t.progress ->> 'sampled_at')::timestamptz AS sampled_at
    FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id
    WHERE t.state IN ('running', 'cancelling') AND t.progress IS NOT NULL
      AND t.progress -> 'token' = to_jsonb(t.attempt_token)
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())))
    UNION ALL
    -- An export's coordinator reports its parts: written of planned, and the bytes so far.
    SELECT t.id, t.job_id, t.name, 'EXPORT',
           format('writing parts (%s written)', pg_size_pretty(p.bytes)), p.done, e.parts_total::bigint, 'parts', now()
    FROM deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
    JOIN deckhand.task t ON t.job_id = e.job_id AND t.kind = 'export' AND t.state IN ('running', 'cancelling')
    CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE q.finished_at IS NOT NULL) AS done, coalesce(sum(q.bytes), 0) AS bytes
                        FROM deckhand.export_part q WHERE q.export_id = e.id AND q.epoch = e.epoch) p
    WHERE e.parts_total > 0 AND e.state NOT IN ('committed', 'superseded')
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())))
    UNION ALL
    -- A move reports its step (deckhand.move_progress, which only workers read), and the
    -- tables its copy has copied of those it copies.
    SELECT t.id, t.job_id, t.name, 'MOVE', m.step, m.tables_copied::bigint, m.tables::bigint, 'tables', m.updated_at
    FROM deckhand.move_progress m JOIN deckhand.task t ON t.id = m.task_id JOIN deckhand.job j ON j.id = t.job_id
    WHERE t.state IN ('running', 'cancelling')
      AND ((SELECT deckhand.sees_all()) OR j.submitted_by = session_user OR (cardinality(j.owners) > 0 AND j.owners <@ (SELECT deckhand.member_roles())));
