package catalog_test

import "testing"

// On a walked fleet, a node whose tasks all wait out a retry's backoff gives the claim
// nothing and does not end the walk: claims that start anywhere before it still reach the
// idle node with work after it.
func TestNodeInBackoffDoesNotHideTheNodesAfterIt(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'f' || lpad(g::text, 3, '0'), 'host=/nonexistent', 'f' || lpad(g::text, 3, '0'), 'primary', 4
		FROM generate_series(1, 65) g`)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES
		('x1', 'host=/nonexistent', 'x1', 'primary', 4), ('x2', 'host=/nonexistent', 'x2', 'primary', 4)`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 1, 'infinity')`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 2) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, not_before, attempts)
		SELECT j.id, n, 'sql', n, 'app', 'SELECT 1', 3, '1 hour', 'runnable',
			CASE WHEN n = 'x1' THEN now() + interval '1 hour' ELSE '-infinity' END, CASE WHEN n = 'x1' THEN 1 ELSE 0 END
		FROM j, unnest(ARRAY['x1', 'x2']) n`)
	missed := 0
	for i := range 10 {
		f := float64(i) / 10 // starts from f001 to f059
		cat.Rand = func() float64 { return f }
		claimed, err := cat.Claim(ctx, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) == 0 {
			missed++
			continue
		}
		if _, err := cat.Pool.Exec(ctx, `UPDATE deckhand.task SET state = 'runnable', worker_id = NULL WHERE id = $1`, claimed[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	if missed > 0 {
		t.Fatalf("%d of 10 claims of one task took nothing, though x2 is idle with a task runnable now (x1's waits out a backoff)", missed)
	}
}
