package catalog_test

import "testing"

// Claims take higher priorities first, and a job waits behind higher priorities at most the
// difference in minutes (docs/architecture.md), whichever set its tasks are in: a claim of one
// task takes a priority 100 job's task of an idle node, submitted an hour ago, before a
// priority -100 job's task that runs anywhere, submitted now.
func TestNodeTaskGoesBeforeLowerPriorityTasksThatRunAnywhere(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ('n1', 'host=/nonexistent', 'n1', 'primary', 4)`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 1, 'infinity')`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, priority, created_at)
			VALUES ('urgent', 'sql', 1, 100, now() - interval '1 hour') RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, claim_key)
		SELECT j.id, 'on-node', 'sql', 'n1', 'app', 'SELECT 1', 3, '1 hour', 'runnable', now() - interval '1 hour' - interval '100 minutes' FROM j`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, priority) VALUES ('whenever', 'noop', 1, -100) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, sql, max_attempts, timeout, state, claim_key)
		SELECT j.id, 'anywhere', 'noop', 'app', '', 3, '1 hour', 'runnable', now() + interval '100 minutes' FROM j`)
	claimed, err := cat.Claim(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].Name != "on-node" {
		var names []string
		for _, c := range claimed {
			names = append(names, c.Name)
		}
		t.Fatalf("a claim of one task took %v, want the priority 100 job's task on-node (claim_key 160 minutes earlier)", names)
	}
}
