package catalog_test

import "testing"

// On a fleet of more than 64 nodes the claim walks; a group's members that have not replayed
// past the group's first task are no candidates, so replicas that lag, however many sort
// before the group's primary, never keep a claim from reaching it.
func TestGroupTaskIsNotStarvedByLaggingReplicas(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	// 65 idle nodes, and the group: two lagging replicas named before its primary.
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'f' || lpad(g::text, 3, '0'), 'host=/nonexistent', 'f' || lpad(g::text, 3, '0'), 'primary', 4
		FROM generate_series(1, 65) g`)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks, replay_lsn) VALUES
		('grp-a', 'host=/nonexistent', 'grp', 'standby', 4, '0/10'),
		('grp-b', 'host=/nonexistent', 'grp', 'standby', 4, '0/10'),
		('grp-z', 'host=/nonexistent', 'grp', 'primary', 4, '0/FFFF')`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 1, 'infinity')`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('part', 'sql', 1) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node_group, min_lsn, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 'part', 'sql', 'grp', '0/1000', 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j`)
	for i := 0; i < 20; i++ {
		f := float64(i) / 20
		cat.Rand = func() float64 { return f }
		claimed, err := cat.Claim(ctx, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) > 0 {
			if claimed[0].Node == nil || *claimed[0].Node != "grp-z" {
				t.Fatalf("group task claimed on %v, want grp-z (the only member past its min_lsn)", claimed[0].Node)
			}
			return
		}
	}
	t.Fatal("20 claims of one task left the group task runnable, though the group's primary is idle")
}
