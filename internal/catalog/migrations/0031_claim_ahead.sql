-- A worker whose tasks on a node turn over quickly claims some of the node's next tasks ahead
-- of its free slots there (claimSQL): a task claimed ahead is running, held by the worker, but
-- waits in it for one of that worker's tasks on the node to end, and starts in its slot at
-- once, without waiting for a catalog round trip. It holds none of the node's max_tasks
-- slots until the completion that records the end of the task it replaced hands it that slot
-- (completeSQL), in the same transaction: what the catalog counts against max_tasks never
-- falls below what runs on the node.
--
-- No index refers to the column: handing a slot over changes only it, and the row's new
-- version can then stay on its page with no new index entry (a HOT update). The claims' counts
-- of a node's slots in use read the running tasks on the node (task_active_on_node_idx) and
-- pass those claimed ahead.
ALTER TABLE deckhand.task ADD COLUMN queued boolean NOT NULL DEFAULT false;

-- A node's running tasks are those that hold one of its slots: a task claimed ahead has not
-- started there yet.
CREATE OR REPLACE VIEW deckhand.nodes AS
    SELECT name, dsn, node_group, max_tasks, role, replay_lsn, checked_at, last_error, created_at,
           (SELECT count(*) FROM deckhand.task t WHERE t.node = n.name AND t.state IN ('running', 'cancelling')
                AND NOT t.queued) AS running_tasks
    FROM deckhand.node n;
