-- A catalog role may hold the rows of a job it may act on locked for as long as it likes:
-- deckhand.pause, cancel, resume and retry lock them, and the caller's statement
-- (`SELECT deckhand.pause(42), pg_sleep(3600)`) or its open transaction keeps them locked.
-- A completion settles the jobs it may have ended right after its commit, in the same round
-- trip: waiting there for such a lock held back the worker's every later result and claim.
-- A job whose row is locked is left to the leader's settling (catalog.SettleJobs), which
-- skips it too until it is free. Everything else is as in 0013_job_tally.sql.
CREATE OR REPLACE FUNCTION deckhand.settle_ended(task_ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
    SET lock_timeout = '2s' AS $$
DECLARE
    ended bigint;
BEGIN
    FOR ended IN
        SELECT j.id FROM deckhand.job j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT t.job_id FROM deckhand.task t WHERE t.id = ANY (task_ids)))
          AND j.state NOT IN ('finished', 'failed', 'cancelled')
          AND j.tasks_total - j.tasks_done - j.tasks_failed - j.tasks_cancelled - j.tasks_unscheduled
              - coalesce((SELECT sum(y.done) FROM deckhand.job_tally y WHERE y.job_id = j.id), 0) <= 0
        ORDER BY j.id
    LOOP
        BEGIN
            -- A no-op update: the job's trigger folds the tallies and derives the state.
            UPDATE deckhand.job SET tasks_done = tasks_done WHERE id = ended;
        EXCEPTION WHEN deadlock_detected OR lock_not_available THEN
            NULL;
        END;
    END LOOP;
END $$;
