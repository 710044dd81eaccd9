package catalog_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// A worker's claim statement takes only from the sets of tasks its claims found runnable work
// in lately. Work that comes to another set must still be taken in priority order, at once: the
// reduced statement takes nothing when another set has work, and the same Claim takes again
// from every set.
func TestClaimTakesWorkOfASetItsLastClaimFoundEmpty(t *testing.T) {
	cat := migratedCatalog(t)
	// The catalog's clock, which also says how long ago a set last had work (seenSets).
	now := time.Now()
	cat.Now = func() time.Time { return now }
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES
		('n1', 'host=/nonexistent', 'n1', 'primary', 4), ('g1-primary', 'host=/nonexistent', 'g1', 'primary', 4)`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 10, 'infinity')`)
	// Low priority work on a node: the first claims find only that set.
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('later', 'sql', 3) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state, claim_key)
		SELECT j.id, 'on-node-' || g, 'sql', 'n1', 'app', 'SELECT 1', 3, '1 hour', 'runnable', now() + interval '100 minutes'
		FROM j, generate_series(1, 3) g`)
	claimOne := func(want string) {
		t.Helper()
		claimed, err := cat.Claim(ctx, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) != 1 || claimed[0].Name != want {
			t.Fatalf("a claim of one task took %v, want %s", names(claimed), want)
		}
	}
	claimOne("on-node-1")
	// Higher priorities come to the other sets, one at a time.
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('anywhere', 'noop', 1) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state, claim_key)
		SELECT j.id, 'anywhere', 'noop', 'app', 3, '1 hour', 'runnable', now() FROM j`)
	claimOne("anywhere")
	claimOne("on-node-2")
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('group', 'sql', 1) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node_group, min_lsn, owner, sql, max_attempts, timeout, state, claim_key)
		SELECT j.id, 'in-group', 'sql', 'g1', '0/0', 'app', 'SELECT 1', 3, '1 hour', 'runnable', now() FROM j`)
	claimOne("in-group")
	claimOne("on-node-3")

	// Nothing runnable for longer than the sets are remembered: idle claims run no claim
	// statement. The work that comes next is taken by the next Claim all the same.
	now = now.Add(2 * time.Second)
	if claimed, err := cat.Claim(ctx, 1, 4); err != nil || len(claimed) != 0 {
		t.Fatalf("an idle claim took %v (%v)", names(claimed), err)
	}
	exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('after idle', 'noop', 1) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
		SELECT j.id, 'after-idle', 'noop', 'app', 3, '1 hour', 'runnable' FROM j`)
	claimOne("after-idle")
}

func names(claimed []deckhandtype.ClaimedTask) []string {
	var out []string
	for _, c := range claimed {
		out = append(out, c.Name)
	}
	return out
}
