package catalog

import (
	"context"
	"fmt"
)

// MoveExportCoordinator binds an export's coordinator task to node to, another member of the
// export's group, while attempt token of it runs: after a failover of the group the coordinator
// must hold its lock on the new primary, and its task was bound at submission to the old one.
// The attempt then ends (retried), and the next is claimed on to; the parts of the old epoch
// are superseded as after any lost coordinator. It reports false when the attempt is no
// longer current, or to is not a member of the group.
func (c *Catalog) MoveExportCoordinator(ctx context.Context, taskID, token int64, to string) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.task t SET node = n.name
		FROM deckhand.export e, deckhand.node n
		WHERE t.id = $1 AND t.attempt_token = $2 AND t.state = 'running' AND t.kind = 'export'
		  AND e.job_id = t.job_id AND n.name = $3 AND n.node_group = e.node_group`, taskID, token, to)
	if err != nil {
		return false, fmt.Errorf("move the coordinator of task %d to node %s: %w", taskID, to, err)
	}
	return tag.RowsAffected() == 1, nil
}
