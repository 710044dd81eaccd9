package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/schedule"
	"github.com/deckhandhq/deckhand/spec"
)

// The creator of a schedule is the submitter of its jobs, and every firing makes the checks of
// a submission for it: once it is no longer a member of the owner role, or no longer may submit
// at all, the firing is recorded failed with the reason and no job runs. Other submitters
// neither see nor control its schedule.
func TestFiringChecksTheSubmitterEachTime(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	owner := e.Role("owner")
	sub, client := e.Submitter("sub", owner)
	other, otherClient := e.Submitter("other")
	q := pgx.Identifier{sub}.Sanitize()

	job := &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", Owner: owner, SQL: "SELECT 1"}}}
	_, next, err := schedule.Add(ctx, client, schedule.Request{Name: "audit", Job: job, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Owner membership is checked at creation already.
	_, _, err = schedule.Add(ctx, otherClient, schedule.Request{Name: "stolen", Job: job, Every: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "is not a member of role") {
		t.Errorf("%s scheduled a job as %s: %v", other, owner, err)
	}

	clock := &fakeClock{}
	s := service(t, e, clock)
	fireAt := func(at time.Time) deckhandtype.ScheduleRun {
		t.Helper()
		clock.Set(at)
		fireDue(t, s)
		rs := runs(t, e, "audit")
		if len(rs) == 0 || !rs[len(rs)-1].DueAt.Equal(at) {
			t.Fatalf("no firing for %s: %+v", at, rs)
		}
		return rs[len(rs)-1]
	}
	r := fireAt(next)
	if r.Outcome != deckhandtype.FiringSubmitted || r.JobID == nil {
		t.Fatalf("first firing: %+v", r)
	}
	d, err := e.Client.Job(ctx, *r.JobID)
	if err != nil || d.SubmittedBy != sub {
		t.Fatalf("the scheduled job's submitter is %q (%v), want %s", d.SubmittedBy, err, sub)
	}

	e.Exec("postgres", "REVOKE "+pgx.Identifier{owner}.Sanitize()+" FROM "+q)
	r = fireAt(next.Add(time.Hour))
	if r.Outcome != deckhandtype.FiringFailed || r.JobID != nil || r.Error == nil || !strings.Contains(*r.Error, "is not a member of role") {
		t.Errorf("firing after losing the owner role: %+v %v", r, deref(r.Error))
	}

	e.Exec("postgres", "GRANT "+pgx.Identifier{owner}.Sanitize()+" TO "+q+"; REVOKE deckhand_submitter FROM "+q)
	r = fireAt(next.Add(2 * time.Hour))
	if r.Outcome != deckhandtype.FiringFailed || r.JobID != nil || r.Error == nil || !strings.Contains(*r.Error, "may not submit jobs") {
		t.Errorf("firing after losing deckhand_submitter: %+v %v", r, deref(r.Error))
	}
	e.Exec("postgres", "GRANT deckhand_submitter TO "+q)

	// Another submitter neither sees nor controls the schedule.
	if _, err := otherClient.Catalog().Schedule(ctx, "audit"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("%s reads the schedule of %s: %v", other, sub, err)
	}
	if err := otherClient.Catalog().RemoveSchedule(ctx, "audit"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("%s removes the schedule of %s: %v", other, sub, err)
	}
	// Its submitter does.
	if err := client.Catalog().PauseSchedule(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	clock.Set(next.Add(5 * time.Hour))
	fireDue(t, s)
	if rs := runs(t, e, "audit"); len(rs) != 3 {
		t.Errorf("a paused schedule fired: %+v", rs)
	}
	if err := client.Catalog().RemoveSchedule(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	// The jobs it made stay, and still name it by id.
	d, err = e.Client.Job(ctx, d.ID)
	if err != nil || d.Schedule == nil || d.Schedule.Name != nil {
		t.Errorf("job of a removed schedule: %+v (%v)", d.Schedule, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// From psql: deckhand.schedule_add fills each task's owner with the caller and leaves the
// first due time to the leader, which computes it from its clock; the firing then submits for
// the caller. A caller without deckhand_submitter is refused.
func TestScheduleAddFromSQL(t *testing.T) {
	e := testenv.New(t)
	sub, client := e.Submitter("sqlsub")
	_, err := client.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('fromsql',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 minute')`)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	s := service(t, e, clock)
	t0 := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	clock.Set(t0)
	fireDue(t, s)
	sch, err := e.Client.Catalog().Schedule(ctx, "fromsql")
	if err != nil || sch.NextRunAt == nil || !sch.NextRunAt.Equal(t0.Add(time.Minute)) || sch.SubmittedBy != sub ||
		len(sch.Owners) != 1 || sch.Owners[0] != sub {
		t.Fatalf("schedule from SQL: %+v (%v)", sch, err)
	}
	clock.Set(t0.Add(time.Minute))
	fireDue(t, s)
	rs := runs(t, e, "fromsql")
	if len(rs) != 1 || rs[0].JobID == nil {
		t.Fatalf("firings: %+v", rs)
	}
	d, err := e.Client.Job(ctx, *rs[0].JobID)
	if err != nil || d.SubmittedBy != sub || d.Tasks[0].Owner != sub {
		t.Errorf("job: submitter %q, owner %q (%v); want %s for both", d.SubmittedBy, d.Tasks[0].Owner, err, sub)
	}

	// A cron expression only the leader parses, and refuses: recorded, never fired.
	if _, err := client.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add('badcron',
		'{"tasks": [{"name": "t", "kind": "noop"}]}', cron => '99 * * * *')`); err != nil {
		t.Fatal(err)
	}
	fireDue(t, s)
	bad, err := e.Client.Catalog().Schedule(ctx, "badcron")
	if err != nil || bad.NextRunAt != nil || bad.LastOutcome == nil || *bad.LastOutcome != deckhandtype.FiringFailed ||
		bad.LastError == nil || !strings.Contains(*bad.LastError, "timing is invalid") {
		t.Errorf("schedule with a bad cron: %+v (%v)", bad, err)
	}
	clock.Set(t0.Add(24 * time.Hour))
	fireDue(t, s)
	if rs := runs(t, e, "badcron"); len(rs) != 0 {
		t.Errorf("a schedule with a bad cron fired: %+v", rs)
	}

	outsider := e.Role("outsider")
	oc, err := pgx.Connect(ctx, e.RoleDSN(outsider))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close(ctx)
	_, err = oc.Exec(ctx, `SELECT deckhand.schedule_add('x', '{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 minute')`)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a role without deckhand_submitter added a schedule: %v", err)
	}
}
