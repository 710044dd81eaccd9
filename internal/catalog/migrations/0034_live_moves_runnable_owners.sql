-- A move that has not begun held its objects against every role that may act on its job
-- (0031), and a member of every owner of a job may act on it. But the catalog does not ask
-- whether a submitter may run as the owners it names (the nodes do, when a task runs): any
-- submitter could write, from psql, a move of a tenant's schema naming the tenant as its
-- owner and keep it from ending (paused), or write one at each firing of a schedule. Such a
-- job can never run, yet it held the schema against the tenant's own moves and rebalances,
-- until the tenant found and cancelled each.
--
-- A move that has not begun now holds its objects against a role other than its submitter
-- only if its submitter may act on a job of those owners in the catalog's cluster: an admin
-- (or worker), or a member of every owner — a job that may run. Where the catalog's cluster
-- lacks the owner roles, such a move holds its objects against its submitter alone; two moves
-- of one object are still kept apart when they begin (BeginMove). The marks of moves under
-- way hold their objects against everyone, as before.
CREATE OR REPLACE FUNCTION deckhand.live_moves_for(who text)
RETURNS TABLE (schema_name text, table_name text, moving_job_id bigint, moving_to text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- Through task_move_not_ended_idx whatever the statistics were when the session planned it:
-- a sequential scan of the task table reads every finished task at each move submission.
SET enable_seqscan = off AS $$
    SELECT p.schema_name, p.table_name, p.moving_job_id, p.moving_to
    FROM deckhand.placement p
    WHERE p.moving_job_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = p.moving_job_id
                  AND j.state NOT IN ('finished', 'failed', 'cancelled'))
    UNION ALL
    SELECT o.schema_name, o.table_name, t.job_id, t.moving_to
    -- The target once per task: read for each object, it read the whole payload again.
    FROM (SELECT t.job_id, t.payload, coalesce(t.payload ->> 'to', '') AS moving_to FROM deckhand.task t
          WHERE t.kind = 'move' AND t.state IN ('blocked', 'runnable', 'running', 'cancelling', 'paused')
            AND EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = t.job_id
                        AND j.state NOT IN ('finished', 'failed', 'cancelled')
                        AND (j.submitted_by = who
                             -- The submitter asked as a role that submitted nothing (NULL):
                             -- whether it may act on a job of these owners, so may run it.
                             OR (deckhand.role_may_act_on(j.submitted_by, NULL, j.owners)
                                 AND deckhand.role_may_act_on(who, j.submitted_by, j.owners))))
          -- Decided for each task before its payload is read: another role's payloads cost
          -- this role nothing.
          OFFSET 0) t
    CROSS JOIN LATERAL deckhand.move_objects(t.payload) o
$$;
