-- Done counts that have not reached their job's row yet. Were every completion to add to
-- deckhand.job.tasks_done, the completions of one job's tasks by many workers would queue on
-- that row's lock, each waiting for the one before it to commit. A batch whose tasks of a job
-- all ended done (nearly every batch) adds its count to the completer's own row here instead;
-- every update of the job's row folds these rows into its counters first (derive_job_state
-- below), so a job's state is always derived from complete counts. Readers add what is not
-- folded yet (the deckhand.jobs view, Stats).
CREATE TABLE deckhand.job_tally (
    job_id    bigint NOT NULL REFERENCES deckhand.job (id) ON DELETE CASCADE,
    completer bigint NOT NULL, -- the worker that recorded the results (its own row: no contention)
    done      int NOT NULL,
    PRIMARY KEY (job_id, completer)
);
REVOKE ALL ON deckhand.job_tally FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON deckhand.job_tally TO deckhand_worker;
CREATE TRIGGER guard_writes BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON deckhand.job_tally
    FOR EACH STATEMENT EXECUTE FUNCTION deckhand.guard_writes();

-- As in 0011_job_control.sql, folding the job's tallies in first. The job's row is locked when
-- a BEFORE UPDATE trigger runs, and the DELETE takes a snapshot of its own: it removes every
-- tally committed before the lock was granted. A tally being written (locked by a completion
-- that has not committed) is passed rather than waited for: that completion commits later,
-- and settles the job itself if it may have ended it. Waiting made every settling queue behind
-- the completions in flight, and those behind it.
CREATE OR REPLACE FUNCTION deckhand.derive_job_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended int;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        WITH folded AS (
            DELETE FROM deckhand.job_tally y WHERE y.job_id = NEW.id AND y.completer = ANY (ARRAY(
                SELECT f.completer FROM deckhand.job_tally f WHERE f.job_id = NEW.id FOR UPDATE SKIP LOCKED))
            RETURNING y.done)
        SELECT NEW.tasks_done + coalesce(pg_catalog.sum(folded.done), 0) INTO NEW.tasks_done FROM folded;
    END IF;
    ended := NEW.tasks_done + NEW.tasks_failed + NEW.tasks_cancelled + NEW.tasks_unscheduled;
    IF ended >= NEW.tasks_total THEN
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelled'
                          WHEN NEW.tasks_failed + NEW.tasks_unscheduled > 0 THEN 'failed'
                          ELSE 'finished' END;
        NEW.finished_at := coalesce(NEW.finished_at, pg_catalog.now());
    ELSE
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelling'
                          WHEN NEW.pause IS NOT NULL AND NEW.pause_waits_for > 0 THEN 'pausing'
                          WHEN NEW.pause IS NOT NULL THEN 'paused'
                          WHEN NEW.tasks_failed > 0 THEN 'failing'
                          WHEN NEW.started_at IS NOT NULL THEN 'running'
                          ELSE 'scheduled' END;
        NEW.finished_at := NULL;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_catalog.pg_notify('deckhand_job', NEW.notify_key || ':' || NEW.state);
    END IF;
    RETURN NEW;
END $$;

-- As in 0011_job_control.sql, with the done counts not folded yet. The tallies are few rows
-- (one per worker and running job), joined whole: a lookup per job (a LATERAL or scalar
-- subquery) cost a probe for every job a page sorts, and changed the plans of deep pages.
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
    WHERE (SELECT deckhand.sees_all()) OR deckhand.may_act_on(j.submitted_by, j.owners);

-- settle_ended settles the jobs of the given tasks whose tasks have all ended, as the jobs' rows
-- and tallies say in a snapshot taken now. A completion calls it right after its commit: the
-- completion that commits last sees every other completion's tally, so it is the one that
-- ends the job. Each job is updated by a statement of its own, in id order; a deadlock with a
-- completion that moves several jobs on the slow path leaves the job to the leader's round.
CREATE FUNCTION deckhand.settle_ended(task_ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
-- Probes only, whatever the statistics (see probesOnly in claim.go).
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
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
        EXCEPTION WHEN deadlock_detected THEN
            NULL;
        END;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION deckhand.settle_ended(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.settle_ended(bigint[]) TO deckhand_worker;
