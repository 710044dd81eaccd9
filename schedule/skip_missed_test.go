package schedule_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// --skip-missed skips the due times that passed while no leader ran, not the one a leader
// back in time for it reaches within the late window: a nightly schedule whose workers were
// down from before yesterday's run until just after today's skips yesterday's and runs
// today's. It used to skip today's too (the window's latest due time stood for all of them).
// A latest due time that is itself late is skipped with the others.
func TestSkipMissedFiresAnOnTimeDueTime(t *testing.T) {
	e := testenv.New(t)
	clock := &fakeClock{}
	s := service(t, e, clock)
	day := func(n int, hh, mm, ss int) time.Time { return time.Date(2026, 7, n, hh, mm, ss, 0, time.UTC) }
	addAt(t, e, "nightly", "30 2 * * *", "", 0, true, day(1, 2, 30, 0))

	clock.Set(day(3, 2, 30, 10)) // back 10 s after today's due time; yesterday's and the day before's passed
	fireDue(t, s)
	rs := runs(t, e, "nightly")
	if len(rs) != 2 {
		t.Fatalf("firings: %+v, want a skipped one for the missed window and a submitted one for today", rs)
	}
	if r := rs[0]; r.Outcome != deckhandtype.FiringSkippedMissed || !r.DueAt.Equal(day(2, 2, 30, 0)) || r.Missed != 1 || r.JobID != nil {
		t.Errorf("first firing %+v, want skipped_missed for %s with 1 missed", r, day(2, 2, 30, 0))
	}
	if r := rs[1]; r.Outcome != deckhandtype.FiringSubmitted || !r.DueAt.Equal(day(3, 2, 30, 0)) || r.Missed != 0 || r.JobID == nil {
		t.Errorf("second firing %+v, want submitted for %s", r, day(3, 2, 30, 0))
	}
	sch, err := e.Client.Catalog().Schedule(ctx, "nightly")
	if err != nil || sch.NextRunAt == nil || !sch.NextRunAt.Equal(day(4, 2, 30, 0)) {
		t.Errorf("next run %v (%v), want %s", sch.NextRunAt, err, day(4, 2, 30, 0))
	}

	clock.Set(day(5, 2, 35, 0)) // back 5 min after today's: it passed while no leader ran too
	fireDue(t, s)
	rs = runs(t, e, "nightly")
	if len(rs) != 3 {
		t.Fatalf("firings: %+v, want one more", rs)
	}
	if r := rs[2]; r.Outcome != deckhandtype.FiringSkippedMissed || !r.DueAt.Equal(day(5, 2, 30, 0)) || r.Missed != 1 || r.JobID != nil {
		t.Errorf("third firing %+v, want skipped_missed for %s with 1 missed", r, day(5, 2, 30, 0))
	}
}
