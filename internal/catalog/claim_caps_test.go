package catalog_test

import (
	"sync"
	"testing"
)

// On a walked fleet, concurrent claims that take both a node's own tasks and its group's keep
// each node's max_tasks, deal group tasks only to members past their min_lsn, and fill every
// free slot. (No defect found: this passes.)
func TestConcurrentClaimsOfOwnAndGroupTasksOverManyNodesKeepTheCaps(t *testing.T) {
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'f' || lpad(g::text, 3, '0'), 'host=/nonexistent', 'f' || lpad(g::text, 3, '0'), 'primary', 2
		FROM generate_series(1, 66) g;
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks, replay_lsn) VALUES
			('g1', 'host=/nonexistent', 'g', 'primary', 2, '0/FFFF'),
			('g2', 'host=/nonexistent', 'g', 'standby', 2, '0/FFFF'),
			('g3', 'host=/nonexistent', 'g', 'standby', 2, '0/10');
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 400) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, node_group, min_lsn, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql',
			CASE WHEN g <= 200 THEN (ARRAY['g1', 'g2', 'g3', 'f001', 'f066'])[1 + g % 5] END,
			CASE WHEN g > 200 THEN 'g' END, CASE WHEN g > 200 THEN '0/1000'::pg_lsn END,
			'app', 'SELECT 1', 3, '1 hour', 'runnable'
		FROM j, generate_series(1, 400) g`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 6 {
				if _, err := cat.Claim(ctx, 1, 1+i%4); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rows, err := cat.Pool.Query(ctx, `SELECT t.node, count(*), count(*) FILTER (WHERE t.node_group IS NOT NULL), n.max_tasks
		FROM deckhand.task t JOIN deckhand.node n ON n.name = t.node WHERE t.state = 'running' GROUP BY t.node, n.max_tasks ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		var node string
		var n, group, max int
		if err := rows.Scan(&node, &n, &group, &max); err != nil {
			t.Fatal(err)
		}
		total += n
		if n > max {
			t.Errorf("node %s runs %d tasks, max_tasks %d", node, n, max)
		}
		if node == "g3" && group > 0 {
			t.Errorf("g3, behind the group tasks' min_lsn, runs %d of them", group)
		}
	}
	// g1, g2, g3, f001 and f066 have own tasks for every slot: 48 claims fill the 10 slots.
	if total != 10 {
		t.Errorf("%d tasks running, want the 10 slots of the nodes with work filled", total)
	}
}
