package catalog

import (
	"context"
	"slices"
	"testing"
)

// A leader's round looks at StrandedWalkNodes nodes with work, not at all of them, and the
// rounds that follow, each from where the last stopped, reach every node: a removed node's
// tasks are found whatever its name, however many nodes have work.
func TestClaimStrandedWalksTheNodesInBoundedRounds(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
	const nodes = 1000
	execAll(t, cat.Pool,
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		 SELECT 'n' || lpad(g::text, 4, '0'), 'host=/nonexistent', 'g' || g, 'primary', 4 FROM generate_series(1, 1000) g`,
		// A task on every registered node, and on two that are not: one whose name sorts
		// before every other, one after.
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('queued', 'sql', 1002) RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		 SELECT j.id, 't' || n, 'sql', n, 'app', 'SELECT 1', 3, '1 hour', 'runnable'
		 FROM j, (SELECT 'n' || lpad(g::text, 4, '0') FROM generate_series(1, 1000) g
		          UNION ALL VALUES ('a-gone'), ('z-gone')) AS x(n)`,
		`ANALYZE deckhand.task`)
	var taken []string
	from, rounds := "", 0
	for {
		got, next, err := cat.ClaimStranded(ctx, 1, from)
		if err != nil {
			t.Fatal(err)
		}
		rounds++
		for _, s := range got {
			taken = append(taken, s.Node)
		}
		if rounds == 1 {
			if next == "" {
				t.Fatalf("the first round walked all %d nodes with work; want at most %d", nodes+2, StrandedWalkNodes)
			}
			if slices.Contains(taken, "z-gone") {
				t.Errorf("the first round, from the first node, took the tasks of z-gone, past its bound")
			}
		}
		if next == "" {
			break
		}
		if next <= from {
			t.Fatalf("round %d started at %q and hands on %q: the walk does not move on", rounds, from, next)
		}
		from = next
		if rounds > nodes {
			t.Fatal("the walk never reached the last node")
		}
	}
	slices.Sort(taken)
	if !slices.Equal(taken, []string{"a-gone", "z-gone"}) {
		t.Errorf("the rounds took the tasks of %v; want those of a-gone and z-gone alone", taken)
	}
	// Each round moves on by all but one of the nodes it looks at (the last is looked at again).
	if want := (nodes + 2 + StrandedWalkNodes - 2) / (StrandedWalkNodes - 1); rounds != want {
		t.Errorf("%d rounds walked %d nodes with work; want %d", rounds, nodes+2, want)
	}
}
