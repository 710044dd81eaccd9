package schedule_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/schedule"
	"github.com/deckhandhq/deckhand/spec"
)

// A schedule due every second for ten seconds, with two `deckhand serve` processes, the leader
// killed with SIGKILL in the middle: every due time from the first to the last fires exactly
// once — none missed, none doubled — each with its job, and each job's effect on the node
// happens once.
func TestEverySecondAcrossALeaderKill(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 8)
	e.Exec(db, `CREATE TABLE ticks (at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	args := []string{"--lease", "1s", "--maintenance-interval", "100ms", "--concurrency", "4"}
	procs := map[int]*testenv.Process{}
	for range 2 {
		p := e.Serve(args...)
		procs[p.Cmd.Process.Pid] = p
	}
	testenv.Eventually(t, 30*time.Second, func() bool { id, _ := e.Client.Leader(ctx); return id != 0 }, "a leader is elected")

	job := &spec.Job{Description: "tick", Tasks: []spec.Task{{Name: "tick", Node: "n1", SQL: `INSERT INTO ticks DEFAULT VALUES`}}}
	_, first, err := schedule.Add(ctx, e.Client, schedule.Request{Name: "tick", Job: job, Every: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(first.Add(4500 * time.Millisecond)))

	leaderID, err := e.Client.Leader(ctx)
	if err != nil || leaderID == 0 {
		t.Fatalf("leader: %d %v", leaderID, err)
	}
	var name string
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT name FROM deckhand.workers WHERE id = $1`, leaderID).Scan(&name); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(name[strings.LastIndex(name, ":")+1:])
	if err != nil || procs[pid] == nil {
		t.Fatalf("leader %d is %q, not one of the test's processes", leaderID, name)
	}
	if err := procs[pid].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader (worker %d, pid %d) at %s after the first due time", leaderID, pid, time.Since(first).Round(time.Millisecond))
	testenv.Eventually(t, 30*time.Second, func() bool { id, _ := e.Client.Leader(ctx); return id != 0 && id != leaderID },
		"the other worker leads")

	// Ten seconds of due times, then the schedule stops.
	last := first.Add(9 * time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool {
		s, err := e.Client.Catalog().Schedule(ctx, "tick")
		return err == nil && s.LastDueAt != nil && !s.LastDueAt.Before(last)
	}, "the schedule fires its tenth due time")
	if err := e.Client.Catalog().PauseSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}

	rs := runs(t, e, "tick")
	jobs := map[int64]bool{}
	for i, r := range rs {
		if want := first.Add(time.Duration(i) * time.Second); !r.DueAt.Equal(want) {
			t.Fatalf("firing %d is for %s, want %s (a due time missed or doubled): %+v", i, r.DueAt, want, rs)
		}
		if r.Outcome != deckhandtype.FiringSubmitted || r.JobID == nil || r.Missed != 0 {
			t.Errorf("firing for %s: %+v %s", r.DueAt, r, deref(r.Error))
			continue
		}
		jobs[*r.JobID] = true
	}
	if len(rs) < 10 {
		t.Fatalf("%d firings, want at least 10", len(rs))
	}
	// Every job the schedule made is one of the recorded firings: none was written twice.
	var scheduled int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM deckhand.job WHERE schedule_id = $1`, rs[0].ScheduleID).Scan(&scheduled); err != nil {
		t.Fatal(err)
	}
	if scheduled != len(jobs) {
		t.Errorf("%d jobs carry the schedule, %d firings submitted", scheduled, len(jobs))
	}
	for id := range jobs {
		if j := e.Wait(id, 60*time.Second); j.State != deckhandtype.JobFinished {
			t.Errorf("job %d %s", id, j.State)
		}
	}
	var ticks int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM ticks`).Scan(&ticks); err != nil {
		t.Fatal(err)
	}
	if ticks != len(jobs) {
		t.Errorf("%d ticks on the node for %d jobs", ticks, len(jobs))
	}
	var late time.Duration
	for _, r := range rs {
		late = max(late, r.FiredAt.Sub(r.DueAt))
	}
	t.Logf("%d due times, each fired once; the latest firing came %s after its due time", len(rs), late.Round(time.Millisecond))
}

// --no-overlap: a schedule due every second whose job takes three seconds skips the due times
// that come while its previous job runs; its jobs never run at the same time, and every due
// time is accounted for.
func TestNoOverlapSkipsWhileThePreviousJobRuns(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 8)
	e.Worker(engine.Config{Features: []engine.Feature{schedule.Feature()}, Concurrency: 4})
	job := &spec.Job{Tasks: []spec.Task{{Name: "slow", Node: "n1", SQL: `SELECT pg_sleep(3)`}}}
	_, first, err := schedule.Add(ctx, e.Client, schedule.Request{Name: "slow", Job: job, Every: time.Second, NoOverlap: true})
	if err != nil {
		t.Fatal(err)
	}
	last := first.Add(8 * time.Second)
	testenv.Eventually(t, 30*time.Second, func() bool {
		s, err := e.Client.Catalog().Schedule(ctx, "slow")
		return err == nil && s.LastDueAt != nil && !s.LastDueAt.Before(last)
	}, "the schedule fires its ninth due time")
	if err := e.Client.Catalog().PauseSchedule(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	rs := runs(t, e, "slow")
	var jobs []int64
	skipped := 0
	for i, r := range rs {
		if want := first.Add(time.Duration(i) * time.Second); !r.DueAt.Equal(want) {
			t.Fatalf("firing %d is for %s, want %s: %+v", i, r.DueAt, want, rs)
		}
		switch r.Outcome {
		case deckhandtype.FiringSubmitted:
			jobs = append(jobs, *r.JobID)
		case deckhandtype.FiringSkippedOverlap:
			skipped++
		default:
			t.Errorf("firing %+v", r)
		}
	}
	if skipped < 4 || len(jobs) < 2 || len(jobs) > 3 {
		t.Errorf("%d jobs and %d skipped firings over %d due times, want 2 or 3 jobs and the rest skipped", len(jobs), skipped, len(rs))
	}
	var prevEnd *time.Time
	for _, id := range jobs {
		j := e.Wait(id, 30*time.Second)
		if j.State != deckhandtype.JobFinished || j.StartedAt == nil {
			t.Fatalf("job %d %s", id, j.State)
		}
		// created_at is the firing transaction's start, which may precede by a moment the
		// finishing time the previous job's completion wrote before committing; the firing
		// itself looked at that job after the completion committed.
		if prevEnd != nil && j.CreatedAt.Before(prevEnd.Add(-100*time.Millisecond)) {
			t.Errorf("job %d was submitted at %s, before the previous one ended at %s", id, j.CreatedAt, *prevEnd)
		}
		prevEnd = j.FinishedAt
	}
}
