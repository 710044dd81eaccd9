package schedule_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A node that does not answer the owner check holds back the firings that need it (they are
// tried again until a minute late), and only those. A submitter who points a hundred
// schedules (from psql, which checks no node) at a node that is down, due before everyone
// else's, does not hold back the schedules of others until its own are given up as late.
func TestAttackSchedulesOnADownNodeStarveNoOtherSchedule(t *testing.T) {
	e := testenv.New(t)
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "down", DSN: "host=127.0.0.1 port=1 dbname=gone user=gone connect_timeout=2", MaxTasks: 1}); err != nil {
		t.Fatal(err)
	}
	_, mallory := e.Submitter("mallory")
	_, alice := e.Submitter("alice")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 101 {
		if _, err := mallory.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('m' || $1::int,
			'{"tasks": [{"name": "t", "node": "down", "sql": "SELECT 1"}]}', every => '1 hour', next_run_at => $2)`, i, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := alice.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('audit',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 hour', next_run_at => $1)`, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	clock.Set(t0.Add(2 * time.Second))
	s := service(t, e, clock)
	if _, err := s.FireDue(ctx); err == nil {
		t.Error("the schedules on the down node fired without an error")
	}
	rs := runs(t, e, "audit")
	if len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringSubmitted {
		t.Errorf("alice's schedule, due behind a hundred on a down node: firings %+v", rs)
	}
	// The ones on the down node are not given up yet: they are tried again.
	if rs := runs(t, e, "mallory/m0"); len(rs) != 0 {
		t.Errorf("a schedule on the down node was recorded before it was late: %+v", rs)
	}
}
