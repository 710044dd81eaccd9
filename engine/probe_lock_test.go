package engine_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A node whose catalog row stays locked (a claim transaction left open by a worker cut off
// mid-claim, an operator's session) holds up no other node's check: its own check waits for
// the row a moment and is left to the next round. Below, the other nodes answer while the lock
// is held (after it, as the proxy holds their answers back) and their checks are recorded.
func TestLockedNodeRowHoldsUpNoOtherCheck(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	e.AddNode("a-locked", 4) // direct: its check comes in first
	others := []string{"b-00", "b-01", "b-02", "b-03"}
	for _, n := range others {
		e.Node(n) // through the proxy, whose answers are held back a moment
	}
	removeStall := e.Proxy.AddRule(pgtest.Rule{Name: "probe", Match: regexp.MustCompile(`pg_is_in_recovery`), Action: pgtest.ActionStall})
	db := e.Pool(e.DB)
	hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx) //nolint:errcheck
	if _, err := hold.Exec(ctx, `SELECT FROM deckhand.node WHERE name = 'a-locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{})
	testenv.Eventually(t, 5*time.Second, func() bool { return e.Proxy.Hits("probe") >= len(others) }, "the other nodes are probed")
	time.Sleep(500 * time.Millisecond) // a-locked's check has come in, and waits for its row
	removeStall()
	testenv.Eventually(t, 5*time.Second, func() bool {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM deckhand.node WHERE name LIKE 'b-%' AND checked_at IS NOT NULL`).Scan(&n)
		return err == nil && n == len(others)
	}, "the nodes that answered have their checks recorded while a-locked's row is held")
}
