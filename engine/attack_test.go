package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/spec"
)

// Pausing and resuming need the right to act on the job, like cancel: a submitter that is
// not a member of the owner may neither pause an admin's job (holding it back) nor resume
// one that its submitter paused, and learns nothing but the refusal; a member of every owner
// and an admin may. A cancelled job cannot be resumed, nor a paused one that was cancelled.
func TestAttackPauseAndResumeNeedTheRightToActOnTheJob(t *testing.T) {
	e := newIntruderEnv(t)
	long := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{
		{Name: "sleeps", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT pg_sleep(60)"},
		{Name: "after", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1", DependsOn: []string{"sleeps"}}}})
	for name, call := range map[string]func() (deckhandtype.JobState, error){
		"pause":  func() (deckhandtype.JobState, error) { return e.client.Pause(ctx, long, true) },
		"resume": func() (deckhandtype.JobState, error) { return e.client.Resume(ctx, long) },
	} {
		if _, err := call(); !errors.Is(err, catalog.ErrForbidden) || !strings.Contains(err.Error(), "may not "+name) {
			t.Errorf("%s of the admin's job by the intruder: %v, want a refusal", name, err)
		}
	}
	if d := detail(t, e.Env, long); d.PausedAt != nil || d.State == deckhandtype.JobPausing || d.State == deckhandtype.JobPaused {
		t.Errorf("the refused pause was recorded: %s", d.State)
	}
	// The admin pauses; the intruder cannot resume it.
	if _, err := e.Client.Pause(ctx, long, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Resume(ctx, long); !errors.Is(err, catalog.ErrForbidden) {
		t.Errorf("resume of the admin's paused job by the intruder: %v", err)
	}
	// A member of app pauses and resumes app's job.
	_, peer := e.Submitter("peer", e.app)
	appJob, err := e.client.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "sleeps", Node: "n1", Owner: e.app, SQL: "SELECT pg_sleep(60)"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Pause(ctx, appJob, true); err != nil {
		t.Errorf("a member of app pausing app's job: %v", err)
	}
	if _, err := peer.Resume(ctx, appJob); err != nil {
		t.Errorf("a member of app resuming app's job: %v", err)
	}
	// Cancelled while paused: it stays cancelled, whoever resumes it.
	if _, err := e.Client.Cancel(ctx, long); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(long, 30*time.Second); job.State != deckhandtype.JobCancelled {
		t.Fatalf("the paused job, cancelled, is %s", job.State)
	}
	if _, err := e.Client.Resume(ctx, long); err == nil {
		t.Errorf("a cancelled job was resumed")
	}
	if _, err := e.Client.Pause(ctx, long, false); err == nil {
		t.Errorf("a cancelled job was paused")
	}
	if d := detail(t, e.Env, long); d.State != deckhandtype.JobCancelled || d.Tasks[1].State != deckhandtype.TaskCancelled {
		t.Errorf("after resume and pause of the cancelled job: %s, tasks %s %s", d.State, d.Tasks[0].State, d.Tasks[1].State)
	}
	if _, err := e.Client.Cancel(ctx, appJob); err != nil {
		t.Fatal(err)
	}
}
