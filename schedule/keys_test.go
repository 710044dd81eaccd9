package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A scheduled job carries its spec's key and priority like a submitted one: a firing while
// the previous job still holds the key is a failed firing that says so, and no second job.
func TestScheduledJobKeepsKeyAndPriority(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	clock := &fakeClock{}
	s := service(t, e, clock)
	t0 := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	_, err := e.Client.Catalog().AddSchedule(ctx, catalog.NewSchedule{Name: "keyed", Every: time.Hour, NextRunAt: &t0,
		Spec: []byte(`{"key": "nightly", "priority": 7, "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(t0)
	fireDue(t, s)
	clock.Set(t0.Add(time.Hour))
	fireDue(t, s)
	rs := runs(t, e, "keyed")
	if len(rs) != 2 {
		t.Fatalf("firings: %+v", rs)
	}
	var first, second deckhandtype.ScheduleRun
	for _, r := range rs {
		if r.DueAt.Equal(t0) {
			first = r
		} else {
			second = r
		}
	}
	if first.Outcome != deckhandtype.FiringSubmitted || first.JobID == nil {
		t.Fatalf("first firing: %+v", first)
	}
	var key string
	var priority int
	err = e.Pool(e.DB).QueryRow(ctx, `SELECT key, priority FROM deckhand.job WHERE id = $1`, *first.JobID).Scan(&key, &priority)
	if err != nil || key != "nightly" || priority != 7 {
		t.Errorf("job %d: key %q priority %d (%v)", *first.JobID, key, priority, err)
	}
	if second.Outcome != deckhandtype.FiringFailed || second.JobID != nil || second.Error == nil ||
		!strings.Contains(*second.Error, `key "nightly" is held`) {
		t.Errorf("second firing, while the first job holds the key: %+v %s", second, deref(second.Error))
	}
}
