package schedule_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A node that takes connections and never answers holds each firing that checks it for
// nodeconn.CheckTimeout. Schedules due together are fired several at a time: a schedule due
// behind a few such firings is fired while they still wait, not after each has timed out in
// turn.
func TestStalledNodeHoldsBackNoOtherSchedule(t *testing.T) {
	defer func(d time.Duration) { nodeconn.CheckTimeout = d }(nodeconn.CheckTimeout)
	nodeconn.CheckTimeout = 3 * time.Second
	e := testenv.NewProxied(t, pgtest.Shared(t))
	e.Node("n1")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		if _, err := e.Client.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('stalled' || $1::int,
			'{"tasks": [{"name": "t", "node": "n1", "sql": "SELECT 1"}]}', every => '1 hour', next_run_at => $2)`, i, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Client.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('audit',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 hour', next_run_at => $1)`, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	e.Proxy.AddRule(pgtest.Rule{Name: "owner", Match: regexp.MustCompile(`pg_has_role`), Action: pgtest.ActionStall})
	clock := &fakeClock{}
	clock.Set(t0.Add(2 * time.Second))
	s := service(t, e.Env, clock)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.FireDue(ctx) //nolint:errcheck // the stalled firings fail; what matters is when audit fires
	}()
	for {
		if rs := runs(t, e.Env, "audit"); len(rs) == 1 {
			if rs[0].Outcome != deckhandtype.FiringSubmitted {
				t.Errorf("audit's firing: %+v", rs[0])
			}
			break
		}
		select {
		case <-done:
			t.Fatalf("audit fired only once the %d firings on the stalled node had given up", e.Proxy.Hits("owner"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	<-done
	if e.Proxy.Hits("owner") == 0 {
		t.Error("no firing reached the stalled node")
	}
}
