-- deckhand catalog: operations, cleanup records and pins (deferred drop).
-- The state machine of records is documented in catalog/cleanup.go next to its constants.

-- An operation is the scope cleanup records belong to: one attempt of a task (task_id and
-- attempt_token set) or a whole job (task_id NULL). There are no foreign keys to job and task
-- on purpose: retention may delete a job, and a record must never vanish with it; a missing
-- job or task simply means the operation is over.
CREATE TABLE deckhand.operation (
    id            bigserial PRIMARY KEY,
    job_id        bigint NOT NULL,
    task_id       bigint,
    attempt_token bigint,
    worker_id     bigint,
    owner         text NOT NULL,          -- the role removals connect as
    description   text NOT NULL DEFAULT '',
    state         text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'succeeded', 'failed')),
    end_reason    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    CHECK ((task_id IS NULL) = (attempt_token IS NULL))
);
CREATE INDEX operation_running_idx ON deckhand.operation (id) WHERE state = 'running';
CREATE INDEX operation_job_idx ON deckhand.operation (job_id);
-- One job-wide operation at a time per job.
CREATE UNIQUE INDEX operation_job_scope_idx ON deckhand.operation (job_id) WHERE task_id IS NULL AND state = 'running';

CREATE TABLE deckhand.cleanup_record (
    id              bigserial PRIMARY KEY,
    operation_id    bigint NOT NULL REFERENCES deckhand.operation (id) ON DELETE CASCADE,
    resource_type   text NOT NULL CHECK (resource_type IN
        ('table', 'index', 'schema', 'publication', 'subscription', 'replication_slot', 'object', 'prefix')),
    node            text,                  -- NULL for object storage
    location        text NOT NULL DEFAULT '', -- schema of a table or index; bucket URL of an object or prefix
    name            text NOT NULL,
    policy          text NOT NULL CHECK (policy IN ('on_failure', 'always', 'deferred_on_success')),
    -- Removal order inside an operation: subscriptions first (they hold slots and read
    -- publications), then publications and slots, indexes, tables, and schemas last.
    rank            int GENERATED ALWAYS AS (CASE resource_type
                        WHEN 'subscription' THEN 0 WHEN 'object' THEN 0 WHEN 'prefix' THEN 0
                        WHEN 'publication' THEN 1 WHEN 'replication_slot' THEN 1
                        WHEN 'index' THEN 2 WHEN 'table' THEN 3 ELSE 4 END) STORED,
    state           text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'due', 'removed', 'forgotten', 'failed', 'node_removed')),
    -- Why a due record waits: in_use (a query holds it), retrying (a transient error), pinned.
    wait_reason     text CHECK (wait_reason IN ('in_use', 'retrying', 'pinned')),
    attempts        int NOT NULL DEFAULT 0,   -- removal attempts
    errors          int NOT NULL DEFAULT 0,   -- attempts that failed other than by finding the resource in use
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
    created_at      timestamptz NOT NULL DEFAULT now(),
    due_at          timestamptz,
    ended_at        timestamptz               -- removed, forgotten, failed or node_removed
);
-- At most one live record per resource, so that a retry of an operation can never recreate a
-- resource that the cleaner is about to remove on behalf of the failed attempt.
CREATE UNIQUE INDEX cleanup_record_resource_idx ON deckhand.cleanup_record
    (coalesce(node, ''), resource_type, location, name) WHERE state IN ('pending', 'due');
CREATE INDEX cleanup_record_due_idx ON deckhand.cleanup_record (next_attempt_at) WHERE state = 'due';
CREATE INDEX cleanup_record_pending_idx ON deckhand.cleanup_record (operation_id) WHERE state = 'pending';
CREATE INDEX cleanup_record_operation_idx ON deckhand.cleanup_record (operation_id);
CREATE INDEX cleanup_record_ended_idx ON deckhand.cleanup_record (ended_at) WHERE ended_at IS NOT NULL;

-- A pin keeps a resource alive: the cleaner and deckhand's own drops refuse it. A pin held by an
-- operation lasts while the operation runs; one without an operation lasts until removed.
CREATE TABLE deckhand.cleanup_pin (
    id            bigserial PRIMARY KEY,
    resource_type text NOT NULL,
    node          text,
    location      text NOT NULL DEFAULT '',
    name          text NOT NULL,
    operation_id  bigint REFERENCES deckhand.operation (id) ON DELETE CASCADE,
    reason        text NOT NULL DEFAULT '',
    created_by    text NOT NULL DEFAULT session_user,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cleanup_pin_resource_idx ON deckhand.cleanup_pin (coalesce(node, ''), resource_type, location, name);
CREATE INDEX cleanup_pin_operation_idx ON deckhand.cleanup_pin (operation_id);

CREATE VIEW deckhand.operations AS
    SELECT id, job_id, task_id, attempt_token, worker_id, owner, description, state, end_reason,
           created_at, ended_at
    FROM deckhand.operation;

-- state as operators read it: a pending or due record whose node was removed shows
-- node_removed even before the cleaner has marked it; a due record that waits shows why.
CREATE VIEW deckhand.cleanup_records AS
    SELECT r.id, r.operation_id, o.job_id, o.task_id, o.owner, o.state AS operation_state,
           r.resource_type, r.node, r.location, r.name, r.policy,
           CASE WHEN r.state IN ('pending', 'due') AND r.node IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM deckhand.node n WHERE n.name = r.node) THEN 'node_removed'
                WHEN r.state = 'due' AND r.wait_reason IS NOT NULL THEN r.wait_reason
                ELSE r.state END AS state,
           r.attempts, r.errors, r.last_error,
           CASE WHEN r.state = 'due' THEN nullif(r.next_attempt_at, '-infinity') END AS next_attempt_at,
           r.created_at, r.due_at, r.ended_at
    FROM deckhand.cleanup_record r JOIN deckhand.operation o ON o.id = r.operation_id;

-- pinned_by describes the first pin in force on a resource, or NULL. Pins of object storage
-- cover what they contain: a prefix pin keeps every object under it, and a prefix cannot be
-- removed while anything under it is pinned.
CREATE FUNCTION deckhand.pinned_by(rtype text, rnode text, rlocation text, rname text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p.operation_id IS NULL THEN 'pin ' || p.id ELSE 'operation ' || p.operation_id END
           || CASE WHEN p.reason <> '' THEN ' (' || p.reason || ')' ELSE '' END
    FROM deckhand.cleanup_pin p LEFT JOIN deckhand.operation o ON o.id = p.operation_id
    WHERE (p.operation_id IS NULL OR o.state = 'running')
      AND coalesce(p.node, '') = coalesce(rnode, '') AND p.location = rlocation
      AND ((p.resource_type = rtype AND p.name = rname)
           OR (rtype IN ('object', 'prefix') AND p.resource_type IN ('object', 'prefix')
               AND ((rtype = 'prefix' AND starts_with(p.name, rname))
                    OR (p.resource_type = 'prefix' AND starts_with(rname, p.name)))))
    ORDER BY p.id LIMIT 1
$$;

CREATE VIEW deckhand.cleanup_pins AS
    SELECT p.id, p.resource_type, p.node, p.location, p.name, p.operation_id, o.job_id, p.reason,
           p.created_by, p.created_at, (p.operation_id IS NULL OR o.state = 'running') AS in_force
    FROM deckhand.cleanup_pin p LEFT JOIN deckhand.operation o ON o.id = p.operation_id;
