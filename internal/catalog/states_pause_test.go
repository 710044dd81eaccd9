package catalog_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// Pause and resume, from jobs in every state and with tasks in every state. Completions of a
// paused job's tasks are among Complete's cases (TestTaskAndJobStatementsFollowTheStateMachines).
func TestPauseStatementsFollowTheStateMachines(t *testing.T) {
	m := newMachines(t)
	t.Run("PauseJob", m.pauseJob)
	t.Run("ResumeJob", m.resumeJob)
}

// everyTaskState is a job with a task in every state a job that has not ended may hold.
var everyTaskState = []ct.TaskOpts{{State: TaskDone}, {State: TaskRunning}, {Name: "r", State: TaskRunnable},
	{State: TaskBlocked, DependsOn: []string{"r"}}, {State: TaskCancelled}, {State: TaskFailed}}

func (m *machines) pauseJob(t *testing.T) {
	s := m.statement(t, "PauseJob")
	for _, now := range []bool{false, true} {
		pause := func(id int64) func() error {
			return func() error { _, err := m.cat.PauseJob(ctx, id, now); return err }
		}
		for _, st := range JobStates {
			s.run(fmt.Sprintf("a %s job, now %v", st, now), func(c *step) {
				c.do(pause(ct.Job(ctx, t, m.db, &ct.JobOpts{State: st}).ID), catalog.ErrJobTerminal)
			})
		}
		for _, j := range []struct {
			name  string
			tasks []ct.TaskOpts
		}{
			{"every task state", everyTaskState},
			{"nothing running", []ct.TaskOpts{{State: TaskDone}, {State: TaskRunnable}}},
			{"failing, nothing running", []ct.TaskOpts{{State: TaskFailed}, {State: TaskRunnable}}},
			{"failing, a task running", []ct.TaskOpts{{State: TaskFailed}, {State: TaskRunning}}},
		} {
			s.run(fmt.Sprintf("%s, now %v", j.name, now), func(c *step) {
				c.do(pause(ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: j.tasks}).ID))
			})
		}
	}
	s.promised()
}

func (m *machines) resumeJob(t *testing.T) {
	s := m.statement(t, "ResumeJob")
	resume := func(id int64) func() error {
		return func() error { _, err := m.cat.ResumeJob(ctx, id); return err }
	}
	for _, st := range JobStates {
		s.run("a "+string(st)+" job", func(c *step) {
			c.do(resume(ct.Job(ctx, t, m.db, &ct.JobOpts{State: st}).ID), catalog.ErrJobTerminal)
		})
	}
	for _, j := range []struct {
		name string
		opts ct.JobOpts
	}{
		{"paused, never started", ct.JobOpts{Tasks: []ct.TaskOpts{{Name: "p", State: TaskPaused},
			{State: TaskBlocked, DependsOn: []string{"p"}}}}},
		{"paused, started", ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskDone}, {State: TaskPaused}}}},
		{"paused, a task failed", ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskFailed}, {State: TaskPaused}}}},
		{"pausing", ct.JobOpts{Pause: "now", Tasks: []ct.TaskOpts{{State: TaskRunning}, {State: TaskPaused}}}},
		{"pausing, a task failed", ct.JobOpts{Pause: "wait", Tasks: []ct.TaskOpts{{State: TaskFailed}, {State: TaskRunning}}}},
	} {
		s.run(j.name, func(c *step) { c.do(resume(ct.Job(ctx, t, m.db, &j.opts).ID)) })
	}
	s.promised()
}

// completeWhilePaused takes Complete's edges of paused jobs; TestTaskAndJobStatementsFollowTheStateMachines
// holds Complete to all its edges.
func (m *machines) completeWhilePaused(t *testing.T) {
	s := m.statement(t, "Complete")
	complete := func(task ct.TaskRow, o Outcome) func() error {
		return func() error {
			_, err := m.cat.Complete(ctx, []catalog.Result{{TaskID: task.ID, Token: task.Token, WorkerID: task.WorkerID,
				Outcome: o, Backoff: time.Second}})
			return err
		}
	}
	for _, mode := range []string{"wait", "now"} {
		for _, o := range Outcomes {
			s.run(fmt.Sprintf("pause %s, the last running task: %s", mode, o), func(c *step) {
				job := ct.Job(ctx, t, m.db, &ct.JobOpts{Pause: mode, Tasks: []ct.TaskOpts{
					{Name: "x", State: TaskRunning}, {State: TaskBlocked, DependsOn: []string{"x"}}, {State: TaskPaused}}})
				after := c.do(complete(job.Task("x"), o))
				if o == OutcomeRetry || o == OutcomeReleased || o == OutcomeLost {
					if got := after.Tasks[job.Task("x").ID].State; got != TaskPaused {
						t.Errorf("%s: the task is %s, want paused", c.name, got)
					}
				}
			})
			s.run(fmt.Sprintf("pause %s, one of two running tasks: %s", mode, o), func(c *step) {
				job := ct.Job(ctx, t, m.db, &ct.JobOpts{Pause: mode, Tasks: []ct.TaskOpts{{State: TaskRunning}, {State: TaskRunning}}})
				c.do(complete(job.Tasks[0], o))
			})
			s.run(fmt.Sprintf("pause %s, the job's last task: %s", mode, o), func(c *step) {
				job := ct.Job(ctx, t, m.db, &ct.JobOpts{Pause: mode, Tasks: []ct.TaskOpts{{State: TaskDone}, {State: TaskRunning, Attempts: 3}}})
				c.do(complete(job.Tasks[1], o))
			})
		}
	}
}
