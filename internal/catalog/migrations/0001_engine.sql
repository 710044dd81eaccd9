-- deckhand catalog: nodes, jobs, tasks, dependencies, attempts, workers, leader.
-- Tables are singular; the plural views at the end are the stable interface for SQL users.

CREATE TABLE deckhand.node (
    name        text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
    dsn         text NOT NULL,           -- conninfo without password (refused at registration)
    node_group  text NOT NULL,
    max_tasks   int  NOT NULL DEFAULT 4 CHECK (max_tasks > 0),
    role        text NOT NULL DEFAULT 'unknown' CHECK (role IN ('unknown', 'primary', 'standby')),
    replay_lsn  pg_lsn,                  -- last seen replay (standby) or write (primary) position
    checked_at  timestamptz,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deckhand.job (
    id                  bigserial PRIMARY KEY,
    description         text NOT NULL DEFAULT '',
    kind                text NOT NULL DEFAULT 'sql',
    -- The submitter is the catalog session user, forced by trigger so a client cannot claim to be someone else.
    submitted_by        text NOT NULL DEFAULT session_user,
    search_path         text NOT NULL DEFAULT '',
    settings            jsonb NOT NULL DEFAULT '{}',
    state               text NOT NULL DEFAULT 'scheduled'
        CHECK (state IN ('scheduled', 'running', 'finished', 'failing', 'failed', 'cancelling', 'cancelled')),
    -- Task counters, maintained by the statements that move tasks, from which state is derived.
    tasks_total         int NOT NULL DEFAULT 0,
    tasks_done          int NOT NULL DEFAULT 0,
    tasks_failed        int NOT NULL DEFAULT 0,
    tasks_cancelled     int NOT NULL DEFAULT 0,
    tasks_unscheduled   int NOT NULL DEFAULT 0,
    cancel_requested_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz
);
CREATE INDEX job_state_idx ON deckhand.job (state, id);
CREATE INDEX job_finished_idx ON deckhand.job (finished_at) WHERE finished_at IS NOT NULL;

-- A job's state is derived from its task counters on every update, never set by hand
-- (see catalog/state.go for the state machine). Waiters hear about state changes on channel deckhand_job.
CREATE FUNCTION deckhand.derive_job_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended int := NEW.tasks_done + NEW.tasks_failed + NEW.tasks_cancelled + NEW.tasks_unscheduled;
BEGIN
    IF ended >= NEW.tasks_total THEN
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelled'
                          WHEN NEW.tasks_failed + NEW.tasks_unscheduled > 0 THEN 'failed'
                          ELSE 'finished' END;
        NEW.finished_at := coalesce(NEW.finished_at, now());
    ELSE
        NEW.state := CASE WHEN NEW.cancel_requested_at IS NOT NULL THEN 'cancelling'
                          WHEN NEW.tasks_failed > 0 THEN 'failing'
                          WHEN NEW.started_at IS NOT NULL THEN 'running'
                          ELSE 'scheduled' END;
        NEW.finished_at := NULL;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('deckhand_job', NEW.id || ':' || NEW.state);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER job_state BEFORE INSERT OR UPDATE ON deckhand.job
    FOR EACH ROW EXECUTE FUNCTION deckhand.derive_job_state();

CREATE FUNCTION deckhand.force_submitter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.submitted_by := session_user;
    RETURN NEW;
END $$;
CREATE TRIGGER job_submitter BEFORE INSERT ON deckhand.job
    FOR EACH ROW EXECUTE FUNCTION deckhand.force_submitter();

CREATE SEQUENCE deckhand.attempt_token_seq;

CREATE TABLE deckhand.task (
    id              bigserial PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES deckhand.job (id) ON DELETE CASCADE,
    name            text NOT NULL,
    kind            text NOT NULL,
    node            text,                -- NULL for kinds that need no node (noop)
    owner           text NOT NULL,
    sql             text NOT NULL DEFAULT '',
    payload         jsonb,
    in_transaction  boolean NOT NULL DEFAULT true,
    max_attempts    int NOT NULL CHECK (max_attempts > 0),
    timeout         interval NOT NULL,
    state           text NOT NULL
        CHECK (state IN ('blocked', 'runnable', 'running', 'cancelling', 'done', 'failed', 'unscheduled', 'cancelled')),
    pending_deps    int NOT NULL DEFAULT 0,
    attempts        int NOT NULL DEFAULT 0,   -- attempts charged against max_attempts
    runs            int NOT NULL DEFAULT 0,   -- attempts started, including released ones
    not_before      timestamptz NOT NULL DEFAULT '-infinity',
    attempt_token   bigint,                   -- fencing token of the current or last attempt
    worker_id       bigint,
    started_at      timestamptz,              -- start of the current or last attempt
    finished_at     timestamptz,
    last_error      jsonb,
    UNIQUE (job_id, name)
);
-- Claiming only ever looks at runnable tasks, so finished ones (millions) cost nothing.
CREATE INDEX task_runnable_idx ON deckhand.task (node, id) WHERE state = 'runnable';
CREATE INDEX task_active_idx ON deckhand.task (worker_id) WHERE state IN ('running', 'cancelling');
CREATE INDEX task_active_node_idx ON deckhand.task (node) WHERE state IN ('running', 'cancelling');
CREATE INDEX task_job_idx ON deckhand.task (job_id);

CREATE TABLE deckhand.task_dep (
    task_id     bigint NOT NULL REFERENCES deckhand.task (id) ON DELETE CASCADE,
    depends_on  bigint NOT NULL REFERENCES deckhand.task (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, depends_on)
);
CREATE INDEX task_dep_reverse_idx ON deckhand.task_dep (depends_on);

CREATE TABLE deckhand.task_attempt (
    task_id     bigint NOT NULL REFERENCES deckhand.task (id) ON DELETE CASCADE,
    token       bigint NOT NULL,
    attempt     int NOT NULL,             -- 1-based run number of the task
    worker_id   bigint,
    outcome     text NOT NULL CHECK (outcome IN ('done', 'retry', 'failed', 'cancelled', 'lost', 'released')),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    sqlstate    text,
    message     text,
    detail      text,
    hint        text,
    PRIMARY KEY (task_id, token)
);

CREATE TABLE deckhand.worker (
    id               bigserial PRIMARY KEY,
    name             text NOT NULL,
    concurrency      int NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz NOT NULL,
    stopped_at       timestamptz
);
CREATE INDEX worker_live_idx ON deckhand.worker (lease_expires_at) WHERE stopped_at IS NULL;

-- One row; whoever holds an unexpired lease on it is the leader.
CREATE TABLE deckhand.leader (
    singleton        boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    worker_id        bigint NOT NULL,
    elected_at       timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL
);

-- Settings shared by every worker. Absent keys mean built-in defaults.
CREATE TABLE deckhand.setting (
    name  text PRIMARY KEY,
    value text NOT NULL
);

CREATE VIEW deckhand.nodes AS
    SELECT name, dsn, node_group, max_tasks, role, replay_lsn, checked_at, last_error, created_at,
           (SELECT count(*) FROM deckhand.task t WHERE t.node = n.name AND t.state IN ('running', 'cancelling')) AS running_tasks
    FROM deckhand.node n;

CREATE VIEW deckhand.jobs AS
    SELECT id, description, kind, submitted_by, state, tasks_total, tasks_done, tasks_failed,
           tasks_cancelled, tasks_unscheduled,
           tasks_total - tasks_done - tasks_failed - tasks_cancelled - tasks_unscheduled AS tasks_pending,
           created_at, started_at, finished_at, finished_at - created_at AS duration, cancel_requested_at
    FROM deckhand.job;

CREATE VIEW deckhand.tasks AS
    SELECT t.id, t.job_id, t.name, t.kind, t.node, t.owner, t.state, t.attempts, t.max_attempts, t.runs,
           t.not_before, t.worker_id, t.started_at, t.finished_at, t.timeout, t.in_transaction,
           t.last_error ->> 'sqlstate' AS last_sqlstate, t.last_error ->> 'message' AS last_error,
           ARRAY(SELECT p.name FROM deckhand.task_dep d JOIN deckhand.task p ON p.id = d.depends_on
                 WHERE d.task_id = t.id ORDER BY p.name) AS depends_on,
           t.sql
    FROM deckhand.task t;

-- Finished attempts, plus the attempt currently running for each active task.
CREATE VIEW deckhand.task_attempts AS
    SELECT a.task_id, t.job_id, t.name AS task_name, a.attempt, a.token, a.worker_id, a.outcome,
           a.started_at, a.finished_at, a.sqlstate, a.message, a.detail, a.hint
    FROM deckhand.task_attempt a JOIN deckhand.task t ON t.id = a.task_id
    UNION ALL
    SELECT t.id, t.job_id, t.name, t.runs, t.attempt_token, t.worker_id, t.state,
           t.started_at, NULL, NULL, NULL, NULL, NULL
    FROM deckhand.task t WHERE t.state IN ('running', 'cancelling');

CREATE VIEW deckhand.workers AS
    SELECT w.id, w.name, w.concurrency, w.started_at, w.heartbeat_at, w.lease_expires_at, w.stopped_at,
           w.stopped_at IS NULL AND w.lease_expires_at > now() AS alive,
           EXISTS (SELECT 1 FROM deckhand.leader l WHERE l.worker_id = w.id AND l.lease_expires_at > now()) AS is_leader,
           (SELECT count(*) FROM deckhand.task t WHERE t.worker_id = w.id AND t.state IN ('running', 'cancelling')) AS running_tasks
    FROM deckhand.worker w;
