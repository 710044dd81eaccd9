package schedule_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A submitter gives its own schedule a first due time no clock reaches or can count from
// (deckhand.schedule_add's next_run_at from psql: '-infinity', or 4000 BC with an interval of a
// second). Another submitter's schedule, due now, still fires: one role's schedule never
// stops the leader from firing everyone else's.
func TestAttackHostileDueTimesStopNoOtherSchedule(t *testing.T) {
	e := testenv.New(t)
	_, mallory := e.Submitter("mallory")
	_, alice := e.Submitter("alice")
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ name, every, next string }{
		{"never", "1 hour", "-infinity"},
		{"ancient", "1 second", "4000-01-01 00:00:00+00 BC"},
	} {
		if _, err := mallory.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add($1, '{"tasks": [{"name": "t", "kind": "noop"}]}',
			NULL, NULL, $2::interval, false, false, $3::timestamptz)`, tc.name, tc.every, tc.next); err != nil {
			t.Logf("schedule %s refused: %v", tc.name, err) // refusing it is a fine defence
		}
	}
	if _, err := alice.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('audit', '{"tasks": [{"name": "t", "kind": "noop"}]}',
		NULL, NULL, '1 hour', false, false, $1)`, first); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	clock.Set(first.Add(time.Second))
	s := service(t, e, clock)
	for range 3 {
		if _, err := s.FireDue(ctx); err != nil {
			t.Logf("FireDue: %v", err)
		}
	}
	rs := runs(t, e, "audit")
	if len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringSubmitted {
		t.Errorf("alice's schedule, due at %s, fired %+v", first, rs)
	}
}
