package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/schedule"
	"github.com/deckhandhq/deckhand/spec"
)

// A creator whose role may no longer log in to the catalog (ALTER ROLE ... NOLOGIN, the usual
// way to cut someone off, and which ends their API sessions) can no longer submit a job: nor
// do its schedules submit any for it. Each firing fails with the reason until it may log in
// again.
func TestFiringNeedsACreatorThatMayLogIn(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	owner := e.Role("owner")
	sub, client := e.Submitter("leaver", owner)
	q := pgx.Identifier{sub}.Sanitize()
	job := &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", Owner: owner, SQL: "SELECT 1"}}}
	_, next, err := schedule.Add(ctx, client, schedule.Request{Name: "nightly", Job: job, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	s := service(t, e, clock)
	fireAt := func(at time.Time) deckhandtype.ScheduleRun {
		t.Helper()
		clock.Set(at)
		fireDue(t, s)
		rs := runs(t, e, "nightly")
		if len(rs) == 0 || !rs[len(rs)-1].DueAt.Equal(at) {
			t.Fatalf("no firing for %s: %+v", at, rs)
		}
		return rs[len(rs)-1]
	}
	if r := fireAt(next); r.Outcome != deckhandtype.FiringSubmitted {
		t.Fatalf("first firing: %+v %s", r, deref(r.Error))
	}

	e.Exec("postgres", "ALTER ROLE "+q+" NOLOGIN")
	r := fireAt(next.Add(time.Hour))
	if r.Outcome != deckhandtype.FiringFailed || r.JobID != nil || !strings.Contains(deref(r.Error), "may not log in") {
		t.Errorf("firing for a creator that may no longer log in: %+v %s", r, deref(r.Error))
	}

	e.Exec("postgres", "ALTER ROLE "+q+" LOGIN")
	if r := fireAt(next.Add(2 * time.Hour)); r.Outcome != deckhandtype.FiringSubmitted {
		t.Errorf("firing once the creator may log in again: %+v %s", r, deref(r.Error))
	}
}
