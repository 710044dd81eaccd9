package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A submitter may keep its own schedule's row locked for as long as it likes:
// deckhand.schedule_resume (pause, remove) locks it, and the caller's statement or open
// transaction keeps it locked. The leader, firing schedules one after the other, must not
// wait for that lock with everyone else's schedules behind it, to fire one or to set the
// first due time of one.
func TestAttackHeldScheduleLockStarvesNoOtherSchedule(t *testing.T) {
	e := testenv.New(t)
	mallorysRole, mallory := e.Submitter("mallory")
	_, alice := e.Submitter("alice")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := mallory.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('m',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 hour', next_run_at => $1)`, t0); err != nil {
		t.Fatal(err)
	}
	// One with no due time yet: the leader sets its first.
	if _, err := mallory.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('n',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('audit',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 hour', next_run_at => $1)`, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	hold, stopHold := context.WithCancel(ctx)
	defer stopHold()
	held := make(chan error, 1)
	go func() {
		_, err := mallory.Catalog().Pool.Exec(hold, `SELECT deckhand.schedule_resume('m'), deckhand.schedule_resume('n'), pg_catalog.pg_sleep(60)`)
		held <- err
	}()
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE datname = current_database() AND query LIKE '%schedule_resume(''m'')%' AND wait_event = 'PgSleep'`).Scan(&n)
		return err == nil && n == 1
	}, "mallory holds her schedule's row")

	clock := &fakeClock{}
	clock.Set(t0.Add(2 * time.Second))
	s := service(t, e, clock)
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	s.FireDue(fctx) //nolint:errcheck // mallory's schedule may be reported not fired
	if rs := runs(t, e, "audit"); len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringSubmitted {
		t.Errorf("alice's schedule, due behind mallory's held one: firings %+v", rs)
	}
	// Once mallory lets go, hers fires too.
	stopHold()
	<-held
	testenv.Eventually(t, 10*time.Second, func() bool {
		if _, err := s.FireDue(ctx); err != nil {
			t.Fatal(err)
		}
		rs := runs(t, e, mallorysRole+"/m")
		return len(rs) == 1 && rs[0].Outcome == deckhandtype.FiringSubmitted
	}, "mallory's schedule fires once she lets go of it")
}
