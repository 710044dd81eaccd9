package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A schedule's job is written by the leader, a worker, which the catalog lets write the job
// table directly: deckhand.submit_job's checks of the job's own fields do not run for it, and
// the firing must make them. A submitter's schedule (from psql, which stores the spec as it
// is) whose job has a kind label, a description or a search_path that deckhand.submit refuses
// fails its firing instead of writing the job.
func TestAttackScheduledJobPassesTheSubmissionChecks(t *testing.T) {
	e := testenv.New(t)
	mallorysRole, mallory := e.Submitter("mallory")
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, job := range map[string]string{
		"label":       `"kind": "Not A Kind\u001b[2J"`,
		"description": `"description": "` + strings.Repeat("d", 10001) + `"`,
		"search_path": `"search_path": "` + strings.Repeat("s", 10001) + `"`,
	} {
		if _, err := mallory.Catalog().Pool.Exec(ctx, `SELECT deckhand.schedule_add($1,
			('{`+job+`, "tasks": [{"name": "t", "kind": "noop"}]}')::jsonb, every => '1 hour', next_run_at => $2)`,
			name, first); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{}
	clock.Set(first.Add(time.Second))
	s := service(t, e, clock)
	s.FireDue(ctx) //nolint:errcheck // the firings fail
	for _, name := range []string{"label", "description", "search_path"} {
		if rs := runs(t, e, mallorysRole+"/"+name); len(rs) != 1 || rs[0].Outcome != deckhandtype.FiringFailed {
			t.Errorf("schedule %s: firings %+v, want one failed", name, rs)
		}
	}
	jobs, err := e.Client.Jobs(ctx, deckhandtype.JobFilter{})
	if err != nil || len(jobs) != 0 {
		t.Errorf("jobs written: %d (%v)", len(jobs), err)
	}
}
