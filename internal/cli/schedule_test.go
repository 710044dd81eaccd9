package cli_test

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/schedule"
)

// schedule add refuses bad input with exit 2 and one line; a schedule fires, its jobs name it
// in job show, and list, show, pause, resume and remove work with -o json.
func TestScheduleCommands(t *testing.T) {
	e := newEnv(t)
	e.Worker(engine.Config{Concurrency: 4, Features: []engine.Feature{schedule.Feature()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const spec = `{"description": "ping", "tasks": [{"name": "p", "kind": "noop"}]}`

	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "-"), "--cron", "--every")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--cron", "* * * * *", "--every", "1m", "-"), "not both")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--cron", "99 * * * *", "-"), "cron")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--cron", "0 3 * * *", "--timezone", "Nowhere/City", "-"), "unknown time zone")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--every", "soon", "-"), "--every")
	// An interval that is zero or negative is named as such, not taken for a missing one.
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--every", "0s", "-"), "--every 0s", "the shortest interval is 1s")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--every", "-5m", "-"), "--every -5m", "the shortest interval is 1s")
	wantUsage(t, e.runIn(spec, "schedule", "add", "x", "--every", "500ms", "-"), "--every 500ms", "the shortest interval is 1s")
	wantUsage(t, e.runIn(`{"tasks": []}`, "schedule", "add", "x", "--every", "1m", "-"), "no tasks")
	wantUsage(t, e.runIn(spec, "schedule", "add", "bad name", "--every", "1m", "-"), "schedule name")

	r := e.runIn(spec, "schedule", "add", "ping", "--every", "1s", "--no-overlap", "-")
	want(t, r, 0)
	if _, err := strconv.ParseInt(strings.TrimSuffix(r.stdout, "\n"), 10, 64); err != nil || !strings.HasPrefix(r.stderr, "schedule ping: next run 20") {
		t.Errorf("schedule add: stdout %q (want the id), stderr %q (want the next run)", r.stdout, r.stderr)
	}
	wantUsage(t, e.runIn(spec, "schedule", "add", "ping", "--every", "1s", "-"), "already exists")
	want(t, e.runIn(spec, "schedule", "add", "nightly", "--cron", "30 2 * * *", "--timezone", "Europe/Paris", "--skip-missed", "-"), 0)

	type scheduleJSON struct {
		Name         string     `json:"name"`
		Timing       string     `json:"timing"`
		Paused       bool       `json:"paused"`
		NextRunAt    *time.Time `json:"next_run_at"`
		LastJobID    *int64     `json:"last_job_id"`
		LastJobState *string    `json:"last_job_state"`
		SpecSummary  string     `json:"spec_summary"`
		Runs         []struct {
			Outcome string `json:"outcome"`
			JobID   *int64 `json:"job_id"`
		} `json:"runs"`
	}
	list := decode[[]scheduleJSON](t, e.run("schedule", "list", "-o", "json"))
	if len(list) != 2 || list[0].Name != "nightly" || list[0].Timing != "cron 30 2 * * * Europe/Paris" ||
		list[1].Name != "ping" || list[1].Timing != "every 00:00:01" || list[1].SpecSummary != "1 task: ping" {
		t.Fatalf("schedule list: %+v", list)
	}
	var s scheduleJSON
	testenv.Eventually(t, 20*time.Second, func() bool {
		s = decode[scheduleJSON](t, e.run("schedule", "show", "ping", "-o", "json"))
		return s.LastJobID != nil && len(s.Runs) > 0
	}, "the schedule fires")
	jobIDText := strconv.FormatInt(*s.LastJobID, 10)
	e.show(jobIDText) // the promised fields are there
	type scheduledJob struct {
		Schedule *struct {
			Name  string     `json:"name"`
			DueAt *time.Time `json:"due_at"`
		} `json:"schedule"`
	}
	withSchedule := decode[scheduledJob](t, e.run("job", "show", jobIDText, "-o", "json"))
	if withSchedule.Schedule == nil || withSchedule.Schedule.Name != "ping" || withSchedule.Schedule.DueAt == nil {
		t.Errorf("job show -o json of a scheduled job: %+v", withSchedule.Schedule)
	}

	// The tables say the same.
	r = e.run("schedule", "list")
	want(t, r, 0)
	if !strings.Contains(r.stdout, "every 1s (no-overlap)") || !strings.Contains(r.stdout, "cron 30 2 * * * Europe/Paris (skip-missed)") {
		t.Errorf("schedule list:\n%s", r.stdout)
	}
	r = e.run("job", "show", jobIDText)
	if want(t, r, 0); !strings.Contains(r.stdout, "submitted by schedule ping, due 20") {
		t.Errorf("job show of a scheduled job:\n%s", r.stdout)
	}
	r = e.run("schedule", "show", "ping")
	if want(t, r, 0); !strings.Contains(r.stdout, "submitted") {
		t.Errorf("schedule show:\n%s", r.stdout)
	}
	t.Logf("schedule show ping:\n%s", r.stdout)

	want(t, e.run("schedule", "pause", "ping"), 0)
	if s = decode[scheduleJSON](t, e.run("schedule", "show", "ping", "-o", "json")); !s.Paused || s.NextRunAt != nil {
		t.Errorf("paused schedule: %+v", s)
	}
	r = e.run("schedule", "resume", "ping", "-o", "json")
	if resumed := decode[map[string]any](t, r); resumed["next_run_at"] == nil {
		t.Errorf("resume: %s", r.stdout)
	}
	want(t, e.run("schedule", "remove", "ping"), 0)
	wantUsage(t, e.run("schedule", "show", "ping"), "schedule ping: not found")
	wantUsage(t, e.run("schedule", "pause", "ping"), "not found")
}
