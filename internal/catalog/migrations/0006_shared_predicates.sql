-- Predicates that several catalog statements share, written once as SQL functions.
--
-- They are plain LANGUAGE sql functions (no SECURITY DEFINER, no SET clause) so that the
-- planner inlines them: each statement is planned as if the predicate were written out in it.
-- PostgreSQL inlines a scalar SQL function only when its body is a bare expression without a
-- subquery; a predicate that reads other tables is therefore a table function of one row,
-- which is inlined wherever it is called in FROM:
--     FROM deckhand.operation o CROSS JOIN LATERAL deckhand.operation_alive(...) a WHERE a.alive
-- Inlined, a function's body is parsed with the caller's search_path, so it names every table
-- and function with its schema.

-- operation_alive: whether an operation may still create resources (internal/catalog/state.go).
-- An attempt's operation (task set) is alive while its task still runs that attempt, same
-- token, on a worker whose lease is fresh at `at`; a job's operation while its job has not
-- ended. at NULL means now().
CREATE FUNCTION deckhand.operation_alive(job bigint, task bigint, token bigint, at timestamptz)
RETURNS TABLE (alive boolean)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN operation_alive.task IS NOT NULL THEN EXISTS (
                    SELECT 1 FROM deckhand.task t JOIN deckhand.worker w ON w.id = t.worker_id
                    WHERE t.id = operation_alive.task AND t.attempt_token = operation_alive.token
                      AND t.state IN ('running', 'cancelling')
                      AND w.stopped_at IS NULL AND w.lease_expires_at > coalesce(operation_alive.at, pg_catalog.now()))
                ELSE EXISTS (
                    SELECT 1 FROM deckhand.job j
                    WHERE j.id = operation_alive.job AND j.state NOT IN ('finished', 'failed', 'cancelled')) END
$$;

-- cleanup_state_after: what a pending cleanup record becomes when its operation ends in
-- operation_state: forgotten when the policy keeps the resource (on_failure after success,
-- deferred_on_success after failure), due when it must be removed.
CREATE FUNCTION deckhand.cleanup_state_after(operation_state text, policy text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN (cleanup_state_after.operation_state = 'succeeded' AND cleanup_state_after.policy = 'on_failure')
                  OR (cleanup_state_after.operation_state = 'failed' AND cleanup_state_after.policy = 'deferred_on_success')
                THEN 'forgotten' ELSE 'due' END
$$;

-- Only workers run the statements that call them.
REVOKE ALL ON FUNCTION deckhand.operation_alive(bigint, bigint, bigint, timestamptz),
    deckhand.cleanup_state_after(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deckhand.operation_alive(bigint, bigint, bigint, timestamptz),
    deckhand.cleanup_state_after(text, text) TO deckhand_worker;
