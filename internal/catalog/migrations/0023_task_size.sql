-- A task's SQL and payload go whole into the memory of the worker that claims it, a claim's
-- worth of tasks at once, beside every other user's running tasks. deckhand.submit bounded
-- neither (a description is bounded, 10000 characters): a few tasks of a few hundred
-- megabytes each, submitted from psql, killed the worker that claimed them and, retried,
-- the next ones. 16 MiB of either is more than any statement a person writes, and what a
-- worker's concurrency times that costs stays small. NOT VALID: a task written before is
-- not checked again until its row changes. Clients refuse the same before writing
-- (spec.MaxTaskText).
ALTER TABLE deckhand.task
    ADD CONSTRAINT task_sql_at_most_16_mib CHECK (octet_length(sql) <= 16777216) NOT VALID,
    ADD CONSTRAINT task_payload_at_most_16_mib CHECK (payload IS NULL OR octet_length(payload::text) <= 16777216) NOT VALID;
