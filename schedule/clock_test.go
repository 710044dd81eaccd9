package schedule_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/schedule"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// service is a schedule service on the env's catalog with a clock of the test's, fired by
// the test (FireDue) rather than by a leader.
func service(t *testing.T, e *testenv.Env, clock *fakeClock) *schedule.Service {
	t.Helper()
	cat, err := catalog.Open(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	cat.Now = clock.Now
	return schedule.NewService(engine.Deps{Catalog: cat, Submissions: e.Client, Clock: clock, Logger: slog.Default()})
}

// addAt writes a schedule whose first due time is first, as `schedule add` would.
func addAt(t *testing.T, e *testenv.Env, name, cronExpr, tz string, every time.Duration, skipMissed bool, first time.Time) {
	t.Helper()
	_, err := e.Client.Catalog().AddSchedule(ctx, catalog.NewSchedule{Name: name,
		Spec: []byte(`{"description": "tick", "tasks": [{"name": "t", "kind": "noop"}]}`),
		Cron: cronExpr, Timezone: tz, Every: every, SkipMissed: skipMissed, NextRunAt: &first})
	if err != nil {
		t.Fatal(err)
	}
}

func runs(t *testing.T, e *testenv.Env, name string) []deckhandtype.ScheduleRun {
	t.Helper()
	rs, err := e.Client.Catalog().ScheduleRuns(ctx, name, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first.
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	return rs
}

func fireDue(t *testing.T, s *schedule.Service) {
	t.Helper()
	if _, err := s.FireDue(ctx); err != nil {
		t.Fatal(err)
	}
}

// On an injected clock: a cron schedule in New York fires once per due time across the
// spring change of daylight saving time, at 03:30 EDT on the night 02:30 does not exist;
// a due time fires once however often the leader looks; a missed window (the clock jumps an
// hour past the due time, as after an outage) fires once for its latest due time, counting the
// others as missed; with --skip-missed it submits nothing for them.
func TestFiringOnAnInjectedClock(t *testing.T) {
	e := testenv.New(t)
	clock := &fakeClock{}
	s := service(t, e, clock)
	ny, _ := time.LoadLocation("America/New_York")

	first := time.Date(2026, 3, 7, 2, 30, 0, 0, ny)
	addAt(t, e, "nightly", "30 2 * * *", "America/New_York", 0, false, first)
	clock.Set(first.Add(-time.Second))
	fireDue(t, s)
	if rs := runs(t, e, "nightly"); len(rs) != 0 {
		t.Fatalf("fired before its due time: %+v", rs)
	}
	for _, at := range []time.Time{first, time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC)} {
		clock.Set(at.Add(2 * time.Second))
		fireDue(t, s)
		fireDue(t, s) // a second look at the same time finds nothing due
	}
	rs := runs(t, e, "nightly")
	var got []string
	for _, r := range rs {
		if r.Outcome != deckhandtype.FiringSubmitted || r.JobID == nil {
			t.Errorf("firing %+v, want submitted with a job", r)
		}
		got = append(got, r.DueAt.UTC().Format(time.RFC3339))
	}
	if want := "2026-03-07T07:30:00Z 2026-03-08T07:30:00Z 2026-03-09T06:30:00Z"; fmtList(got) != want {
		t.Errorf("due times %s, want %s", fmtList(got), want)
	}
	sch, err := e.Client.Catalog().Schedule(ctx, "nightly")
	if err != nil || sch.NextRunAt == nil || !sch.NextRunAt.Equal(time.Date(2026, 3, 10, 6, 30, 0, 0, time.UTC)) {
		t.Errorf("next run %v (%v), want 2026-03-10T06:30Z", sch.NextRunAt, err)
	}
	// The job records its schedule.
	d, err := e.Client.Job(ctx, *rs[1].JobID)
	if err != nil || d.Schedule == nil || d.Schedule.Name == nil || *d.Schedule.Name != "nightly" ||
		d.Schedule.DueAt == nil || !d.Schedule.DueAt.Equal(rs[1].DueAt) {
		t.Errorf("job %d's schedule: %+v (%v)", *rs[1].JobID, d, err)
	}

	// Missed windows: due every minute from t0; the clock comes back an hour later.
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	addAt(t, e, "fold", "", "", time.Minute, false, t0)
	addAt(t, e, "skip", "", "", time.Minute, true, t0)
	clock.Set(t0.Add(60*time.Minute + 10*time.Second))
	fireDue(t, s)
	fireDue(t, s)
	// The window's latest due time, 10 s late, is not missed: with --skip-missed the others are
	// skipped and it fires on its own (see TestSkipMissedFiresAnOnTimeDueTime).
	if rs := runs(t, e, "skip"); len(rs) != 2 || rs[0].Outcome != deckhandtype.FiringSkippedMissed ||
		!rs[0].DueAt.Equal(t0.Add(59*time.Minute)) || rs[0].Missed != 59 || rs[0].JobID != nil ||
		rs[1].Outcome != deckhandtype.FiringSubmitted || !rs[1].DueAt.Equal(t0.Add(60*time.Minute)) || rs[1].JobID == nil {
		t.Errorf("skip: firings %+v, want skipped_missed for %s with 59 missed, then submitted for %s",
			rs, t0.Add(59*time.Minute), t0.Add(60*time.Minute))
	}
	if rs := runs(t, e, "fold"); len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringSubmitted ||
		!rs[0].DueAt.Equal(t0.Add(60*time.Minute)) || rs[0].Missed != 60 || rs[0].JobID == nil {
		t.Errorf("fold: firings %+v, want one submitted for the due time %s with 60 missed", rs, t0.Add(60*time.Minute))
	}
	for _, name := range []string{"fold", "skip"} {
		sch, _ := e.Client.Catalog().Schedule(ctx, name)
		if sch.NextRunAt == nil || !sch.NextRunAt.Equal(t0.Add(61*time.Minute)) {
			t.Errorf("%s: next run %v, want %s", name, sch.NextRunAt, t0.Add(61*time.Minute))
		}
	}
	// Within the late window due times are caught up one by one (a leader failing over).
	s.LateWindow = 5 * time.Minute
	clock.Set(t0.Add(63*time.Minute + 10*time.Second))
	fireDue(t, s)
	if rs := runs(t, e, "skip"); len(rs) != 5 || rs[2].Outcome != deckhandtype.FiringSubmitted || rs[4].Missed != 0 {
		t.Errorf("caught up: %+v, want three more submitted firings", rs)
	}
}

func fmtList(s []string) string { return strings.Join(s, " ") }

// A spec that no longer passes submission's checks fails its firing, with the reason, and
// the schedule goes on to its next due time.
func TestFiringOfAnInvalidSpecFails(t *testing.T) {
	e := testenv.New(t)
	clock := &fakeClock{}
	s := service(t, e, clock)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	_, err := e.Client.Catalog().AddSchedule(ctx, catalog.NewSchedule{Name: "gone",
		Spec:  []byte(`{"tasks": [{"name": "t", "node": "nowhere", "sql": "SELECT 1"}]}`),
		Every: time.Minute, NextRunAt: &t0})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(t0)
	fireDue(t, s)
	rs := runs(t, e, "gone")
	if len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringFailed || rs[0].Error == nil ||
		!strings.Contains(*rs[0].Error, `unknown node "nowhere"`) {
		t.Fatalf("firings %+v, want one failed for the unknown node", rs)
	}
}

// A scheduled job is written as `job submit` writes one: settings, search_path, description,
// kind, dependencies (tasks listed in any order), timeouts and attempts; and it runs.
func TestScheduledJobIsWrittenLikeASubmittedOne(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	clock := &fakeClock{}
	s := service(t, e, clock)
	t0 := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	_, err := e.Client.Catalog().AddSchedule(ctx, catalog.NewSchedule{Name: "full", Every: time.Hour, NextRunAt: &t0,
		Spec: []byte(`{"description": "two steps", "search_path": "app, public", "settings": {"work_mem": "8MB"},
			"tasks": [{"name": "b", "node": "n1", "sql": "SELECT current_setting('work_mem')", "depends_on": ["a"]},
			          {"name": "a", "node": "n1", "sql": "SELECT 1", "timeout": "90s", "max_attempts": 5}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(t0)
	fireDue(t, s)
	rs := runs(t, e, "full")
	if len(rs) != 1 || rs[0].JobID == nil {
		t.Fatalf("firings: %+v %s", rs, deref(rs[0].Error))
	}
	id := *rs[0].JobID
	var desc, kind, searchPath, workMem string
	err = e.Pool(e.DB).QueryRow(ctx, `SELECT description, kind, search_path, settings ->> 'work_mem' FROM deckhand.job WHERE id = $1`, id).
		Scan(&desc, &kind, &searchPath, &workMem)
	if err != nil || desc != "two steps" || kind != "sql" || searchPath != "app, public" || workMem != "8MB" {
		t.Errorf("job %d: %q %q %q %q (%v)", id, desc, kind, searchPath, workMem, err)
	}
	e.Worker(engine.Config{})
	if j := e.Wait(id, 30*time.Second); j.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", j.State)
	}
	d, err := e.Client.Job(ctx, id)
	if err != nil || len(d.Tasks) != 2 || d.Tasks[0].Name != "a" || d.Tasks[0].TimeoutMS != 90000 || d.Tasks[0].MaxAttempts != 5 ||
		d.Tasks[1].Name != "b" || len(d.Tasks[1].DependsOn) != 1 || d.Tasks[1].DependsOn[0] != "a" {
		t.Errorf("tasks: %+v (%v)", d, err)
	}
	if d.Attempts[0].TaskName != "a" {
		t.Errorf("attempts in order: %+v", d.Attempts)
	}
}
