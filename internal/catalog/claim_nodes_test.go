package catalog_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// With 1,000 nodes registered and work on a third of them, a claim locks a few nodes, about as
// many as its limit needs and never more than min(limit, 64) of their own and as many group
// members; reads as many buffers however many idle nodes there are; and a claimer that starts
// where another holds the nodes passes on to others.
func TestClaimLocksAFewOfManyNodes(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	// Nodes n00010, n00020, ... n10000; every third has 8 tasks of its own. A group of two
	// members has group tasks.
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'n' || lpad((g * 10)::text, 5, '0'), 'host=/nonexistent', 'n' || lpad((g * 10)::text, 5, '0'), 'primary', 4
		FROM generate_series(1, 1000) g`)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		VALUES ('pair1', 'host=/nonexistent', 'pair', 'primary', 4), ('pair2', 'host=/nonexistent', 'pair', 'primary', 4)`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity')`)
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 2667) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, node_group, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql', CASE WHEN g <= 2664 THEN 'n' || lpad((30 * (1 + g % 333))::text, 5, '0') END,
			CASE WHEN g > 2664 THEN 'pair' END, 'app', 'SELECT 1', 3, '1 hour', 'runnable'
		FROM j, generate_series(1, 2667) g`)
	exec(`VACUUM ANALYZE deckhand.task`)

	// locking runs the lock statement of a claim of up to limit tasks starting at node start,
	// in a transaction it leaves open, and returns the nodes the statement says it locked.
	locking := func(t *testing.T, limit int, start string) (pgx.Tx, []string) {
		t.Helper()
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck
		if _, err := tx.Exec(ctx, catalog.ProbesOnly); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, catalog.OrderedProbes); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, catalog.LockNodesSQL, pgx.StrictNamedArgs{"limit": limit, "nodes": min(limit, 64),
			"start_node": start, "start_group": start, "now": (*time.Time)(nil)}); err != nil {
			t.Fatal(err)
		}
		var nodes []string
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('deckhand.claim_nodes')::text[]`).Scan(&nodes); err != nil {
			t.Fatal(err)
		}
		return tx, nodes
	}
	// lockedRows counts the node rows another transaction cannot lock.
	lockedRows := func(t *testing.T) int {
		t.Helper()
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		var locked int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM deckhand.node) - (SELECT count(*) FROM
			(SELECT FROM deckhand.node FOR UPDATE SKIP LOCKED) free)`).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		return locked
	}

	for _, c := range []struct {
		limit    int
		own, all int // most nodes locked for their own tasks, and in all
	}{
		{limit: 1, own: 1, all: 2},
		{limit: 8, own: 2, all: 4},     // 4 slots a node: 2 nodes; and the pair
		{limit: 100, own: 25, all: 27}, // 25 nodes
		{limit: 1000, own: 64, all: 66},
	} {
		for _, start := range []string{"", "n05000", "n09990", "pair1", "zzz"} {
			tx, nodes := locking(t, c.limit, start)
			locked := lockedRows(t)
			own := len(slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return strings.HasPrefix(n, "pair") }))
			// Nodes the walk finds full stay locked, unlisted, to the claim's end.
			if locked < len(nodes) || locked > c.all+2 || own == 0 || own > c.own || len(nodes) > c.all {
				t.Errorf("a claim of %d starting at %q locked %d nodes, said it locked %v (%d for their own tasks): want at most %d, %d for their own",
					c.limit, start, locked, nodes, own, c.all, c.own)
			}
			tx.Rollback(ctx) //nolint:errcheck
		}
	}

	// A claimer that starts where another holds the nodes takes its tasks from other nodes.
	tx, held := locking(t, 8, "n05010")
	cat.Rand = func() float64 { return 500.5 / 1002 } // n05010: the 501st of the 1,002 names
	claimed, err := cat.Claim(ctx, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, c := range claimed {
		if c.Node == nil || slices.Contains(held, *c.Node) {
			t.Errorf("claimed task %d on node %v, held by another claim (%v)", c.ID, c.Node, held)
		} else if !slices.Contains(on, *c.Node) {
			on = append(on, *c.Node)
		}
	}
	if len(claimed) != 8 || len(on) != 2 || on[0] <= "n05010" {
		t.Errorf("claimed %d tasks on %v next to a claim holding %v, want 8 on the 2 nodes after those", len(claimed), on, held)
	}
	tx.Rollback(ctx) //nolint:errcheck

	// Idle nodes between the busy ones change nothing of what a claim reads.
	buffers := func() int {
		t.Helper()
		tx, err := cat.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, catalog.ProbesOnly); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, catalog.OrderedProbes); err != nil {
			t.Fatal(err)
		}
		var out []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+catalog.LockNodesSQL,
			pgx.StrictNamedArgs{"limit": 16, "nodes": 16, "start_node": "n05000", "start_group": "n05000", "now": (*time.Time)(nil)}).Scan(&out); err != nil {
			t.Fatal(err)
		}
		if testing.Verbose() {
			var plan []map[string]any
			if err := json.Unmarshal(out, &plan); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			outline(&b, plan[0]["Plan"].(map[string]any), "")
			t.Logf("locking nodes:\n%s", b.String())
		}
		return planBuffers(t, out)
	}
	few := buffers()
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'n' || lpad(g::text, 5, '0'), 'host=/nonexistent', 'n' || lpad(g::text, 5, '0'), 'primary', 4
		FROM generate_series(1, 10000) g WHERE g % 10 <> 0`)
	exec(`VACUUM ANALYZE deckhand.node`)
	many := buffers()
	// About 25 buffers a node it looks at (its probes, its counts, its lock): some 150 here.
	if few > 300 || many > few+10 {
		t.Errorf("a claim of 16 read %d buffers locking nodes among 1,002 nodes and %d among 10,002, want at most 300 and about as many", few, many)
	}
	t.Logf("a claim of 16 read %d buffers locking nodes among 1,002 nodes and %d among 10,002", few, many)
}

// A node whose name sorts last has its tasks claimed while every other node has more work
// than claims take: claims start at a node picked at random (Catalog.Rand) and wrap around.
func TestClaimReachesTheNodeThatSortsLast(t *testing.T) {
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT name, 'host=/nonexistent', name, 'primary', 2
		FROM (SELECT 'a' || lpad(g::text, 2, '0') FROM generate_series(1, 19) g UNION ALL SELECT 'zz') n(name);
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 2, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 2000) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, n.name || '.' || g, 'sql', n.name, 'app', 'SELECT 1', 3, '1 hour', 'runnable'
		FROM j, deckhand.node n, generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
	cat.Rand = rand.New(rand.NewPCG(1, 2)).Float64
	served := map[string]int{}
	for range 200 {
		claimed, err := cat.Claim(ctx, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) != 2 {
			t.Fatalf("claimed %d tasks, want 2 (every node has work)", len(claimed))
		}
		results := make([]catalog.Result, len(claimed))
		for i, c := range claimed {
			served[*c.Node]++
			results[i] = catalog.Result{TaskID: c.ID, Token: c.Token, WorkerID: 1, Outcome: deckhandtype.OutcomeDone}
		}
		if _, err := cat.Complete(ctx, results); err != nil {
			t.Fatal(err)
		}
	}
	if served["zz"] == 0 || len(served) != 20 {
		t.Errorf("200 claims served %d nodes (%v), want all 20, zz too", len(served), served)
	}
}

// Claims that each see a few of many nodes keep the global max_running_tasks and every node's
// max_tasks together, concurrent or not.
func TestClaimsOverManyNodesKeepTheCaps(t *testing.T) {
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
		SELECT 'n' || lpad(g::text, 4, '0'), 'host=/nonexistent', 'n' || lpad(g::text, 4, '0'), 'primary', 3
		FROM generate_series(1, 1000) g;
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 5000) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql', 'n' || lpad((1 + g % 40 * 25)::text, 4, '0'), 'app', 'SELECT 1', 3, '1 hour', 'runnable'
		FROM j, generate_series(1, 5000) g;
		INSERT INTO deckhand.setting (name, value) VALUES ('max_running_tasks', '50')`); err != nil {
		t.Fatal(err)
	}
	// 40 nodes with work, 3 slots each: 120 slots, of which the global cap allows 50.
	claims := make(chan int, 8)
	for range 8 {
		go func() {
			n := 0
			for range 5 {
				got, err := cat.Claim(ctx, 1, 10)
				if err != nil {
					t.Error(err)
				}
				n += len(got)
			}
			claims <- n
		}()
	}
	total := 0
	for range 8 {
		total += <-claims
	}
	var running, busiest int
	if err := cat.Pool.QueryRow(ctx, `SELECT count(*), max(n) FROM (SELECT count(*) OVER (PARTITION BY node) AS n FROM deckhand.task
		WHERE state = 'running') r`).Scan(&running, &busiest); err != nil {
		t.Fatal(err)
	}
	if total != 50 || running != 50 || busiest > 3 {
		t.Errorf("claims took %d tasks, %d running, at most %d on a node: want 50 (max_running_tasks) and at most 3 a node",
			total, running, busiest)
	}
}

// planBuffers is the buffers an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) says its plan read.
func planBuffers(t *testing.T, out []byte) int {
	t.Helper()
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN: %v (%s)", err, out)
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}
