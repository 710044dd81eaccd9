package catalog_test

import (
	"fmt"
	"slices"
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
	t.Run("ReleaseWhilePaused", m.releaseWhilePaused)
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

// releaseWhilePaused marks a running task of a job paused with "wait" for release once no
// other task of the job runs, and nothing else: it moves no state, and its worker's next look
// at its stops releases it, which pauses it and the job.
func (m *machines) releaseWhilePaused(t *testing.T) {
	s := m.statement(t, "ReleaseWhilePaused")
	for _, c := range []struct {
		name  string
		opts  ct.JobOpts
		stale bool
		want  bool
	}{
		{"pausing, the others paused", ct.JobOpts{Pause: "wait", Tasks: []ct.TaskOpts{{Name: "x", State: TaskRunning},
			{State: TaskDone}, {State: TaskPaused}}}, false, true},
		{"pausing, another still running", ct.JobOpts{Pause: "wait", Tasks: []ct.TaskOpts{{Name: "x", State: TaskRunning},
			{State: TaskRunning}, {State: TaskPaused}}}, false, false},
		{"pausing, by an attempt that is over", ct.JobOpts{Pause: "wait", Tasks: []ct.TaskOpts{{Name: "x", State: TaskRunning},
			{State: TaskPaused}}}, true, false},
		{"paused now already", ct.JobOpts{Pause: "now", Tasks: []ct.TaskOpts{{Name: "x", State: TaskRunning},
			{State: TaskPaused}}}, false, false},
		{"not paused", ct.JobOpts{Tasks: []ct.TaskOpts{{Name: "x", State: TaskRunning}, {State: TaskRunnable}}}, false, false},
	} {
		s.run(c.name, func(st *step) {
			job := ct.Job(ctx, t, m.db, &c.opts)
			x := job.Task("x")
			token := x.Token
			if c.stale {
				token--
			}
			var released bool
			st.do(func() error {
				var err error
				released, err = m.cat.ReleaseWhilePaused(ctx, x.ID, token)
				return err
			})
			stops, err := m.cat.StoppingTasks(ctx, x.WorkerID)
			if err != nil {
				t.Fatal(err)
			}
			if released != c.want || slices.Contains(stops.Release, x.ID) != (c.want || c.opts.Pause == "now") {
				t.Errorf("%s: released %v, the worker's stops %+v; want released %v", c.name, released, stops, c.want)
			}
			if !c.want {
				return
			}
			after := st.check("Complete", func() error {
				_, err := m.cat.Complete(ctx, []catalog.Result{{TaskID: x.ID, Token: x.Token, WorkerID: x.WorkerID,
					Outcome: OutcomeReleased}})
				return err
			})
			if after.Tasks[x.ID].State != TaskPaused || after.Jobs[job.ID].State != JobPaused {
				t.Errorf("%s: once released the task is %s, its job %s; want both paused", c.name,
					after.Tasks[x.ID].State, after.Jobs[job.ID].State)
			}
		})
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
