package catalog_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// Claim, Complete (with every outcome, and the rescue of a dead worker's tasks), CancelJob and
// RetryJob, from tasks and jobs in every state.
func TestTaskAndJobStatementsFollowTheStateMachines(t *testing.T) {
	m := newMachines(t)
	t.Run("Claim", m.claim)
	t.Run("ClaimStranded", m.claimStranded)
	t.Run("CompleteWhilePaused", m.completeWhilePaused) // before Complete, which holds it to every edge
	t.Run("Complete", m.complete)
	t.Run("CancelJob", m.cancelJob)
	t.Run("RetryJob", m.retryJob)
}

func (m *machines) claim(t *testing.T) {
	s := m.statement(t, "Claim")
	claim := func(c *step, tasks ...ct.TaskOpts) {
		w := ct.Worker(ctx, t, m.db, nil)
		ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: tasks})
		c.do(func() error { _, err := m.cat.Claim(ctx, w, 10); return err })
	}
	for _, st := range TaskStates {
		s.run("a lone task "+string(st), func(c *step) { claim(c, ct.TaskOpts{State: st}) })
	}
	s.run("a task beside a failed one", func(c *step) {
		claim(c, ct.TaskOpts{State: TaskFailed}, ct.TaskOpts{State: TaskRunnable})
	})
	s.run("a task of a retried job", func(c *step) {
		w := ct.Worker(ctx, t, m.db, nil)
		ct.Job(ctx, t, m.db, &ct.JobOpts{Started: true, Tasks: []ct.TaskOpts{{State: TaskDone}, {State: TaskRunnable}}})
		c.do(func() error { _, err := m.cat.Claim(ctx, w, 10); return err })
	})
	s.run("a task waiting for its backoff", func(c *step) {
		claim(c, ct.TaskOpts{State: TaskRunnable, NotBefore: m.now.Add(time.Minute)})
	})
	s.promised()
}

// claimStranded takes only the runnable tasks of nodes that are not registered.
func (m *machines) claimStranded(t *testing.T) {
	s := m.statement(t, "ClaimStranded")
	for _, st := range TaskStates {
		for _, registered := range []bool{true, false} {
			s.run("a task "+string(st)+map[bool]string{true: " of a node", false: " of a removed node"}[registered], func(c *step) {
				node := "gone"
				if registered {
					node = ct.Node(ctx, t, m.db, &ct.NodeOpts{})
				}
				w := ct.Worker(ctx, t, m.db, nil)
				ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: []ct.TaskOpts{{State: st, Node: node}}})
				var got []catalog.Stranded
				c.do(func() (err error) { got, _, err = m.cat.ClaimStranded(ctx, w, ""); return err })
				if want := !registered && st == TaskRunnable; (len(got) == 1) != want || len(got) > 1 {
					t.Errorf("%s: took %+v", c.name, got)
				}
			})
		}
	}
	s.promised()
}

func (m *machines) complete(t *testing.T) {
	s := m.statement(t, "Complete")
	complete := func(task ct.TaskRow, o Outcome) func() error {
		return func() error {
			_, err := m.cat.Complete(ctx, []catalog.Result{{TaskID: task.ID, Token: task.Token, WorkerID: task.WorkerID,
				Outcome: o, Backoff: time.Second}})
			return err
		}
	}
	for _, st := range TaskStates {
		for _, o := range Outcomes {
			for _, attempts := range []int{1, 3} {
				s.run(fmt.Sprintf("%s, %s, attempt %d of 3", st, o, attempts), func(c *step) {
					job := ct.Job(ctx, t, m.db, &ct.JobOpts{CancelRequested: st == TaskCancelling,
						Tasks: []ct.TaskOpts{{State: st, Attempts: attempts}}})
					c.do(complete(job.Tasks[0], o))
				})
			}
		}
	}
	for _, o := range Outcomes {
		for _, attempts := range []int{1, 3} {
			s.run(fmt.Sprintf("with dependents, %s, attempt %d of 3", o, attempts), func(c *step) {
				job := ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: []ct.TaskOpts{
					{Name: "x", State: TaskRunning, Attempts: attempts},
					{Name: "y", State: TaskRunning},
					{Name: "d", State: TaskBlocked, DependsOn: []string{"x"}},
					{Name: "e", State: TaskBlocked, DependsOn: []string{"x", "y"}},
					{Name: "f", State: TaskBlocked, DependsOn: []string{"d"}},
				}})
				c.do(complete(job.Task("x"), o))
			})
		}
		s.run("beside a failed task, "+string(o), func(c *step) {
			job := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobFailing})
			c.do(complete(job.Tasks[1], o))
		})
		s.run("beside a failed task still running, "+string(o), func(c *step) {
			job := ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskFailed}, {State: TaskRunning}, {State: TaskRunning}}})
			c.do(complete(job.Tasks[1], o))
		})
		s.run("of a job being cancelled, "+string(o), func(c *step) {
			job := ct.Job(ctx, t, m.db, &ct.JobOpts{CancelRequested: true,
				Tasks: []ct.TaskOpts{{State: TaskCancelling}, {State: TaskCancelling}}})
			c.do(complete(job.Tasks[0], o))
		})
	}
	s.run("a stale attempt", func(c *step) {
		task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
		task.Token--
		c.do(complete(task, OutcomeDone))
	})

	// A dead worker's tasks: ExpireWorkers moves nothing itself, the rescue is Complete(lost).
	for _, st := range []TaskState{TaskRunning, TaskCancelling} {
		for _, attempts := range []int{1, 3} {
			for _, lease := range []time.Duration{-time.Minute, time.Minute} {
				s.run("rescue of "+string(st)+" after a lease of "+lease.String(), func(c *step) {
					w := ct.Worker(ctx, t, m.db, &ct.WorkerOpts{LeaseExpiresAt: m.now.Add(lease)})
					ct.Job(ctx, t, m.db, &ct.JobOpts{CancelRequested: st == TaskCancelling,
						Tasks: []ct.TaskOpts{{State: st, Attempts: attempts, WorkerID: w}}})
					var orphans []catalog.Orphan
					c.check("ExpireWorkers", func() (err error) { orphans, err = m.cat.ExpireWorkers(ctx); return err })
					if (lease < 0) != (len(orphans) == 1) {
						t.Errorf("%s: orphans %+v", c.name, orphans)
					}
					for _, o := range orphans {
						c.do(complete(ct.TaskRow{ID: o.TaskID, Token: o.Token, WorkerID: o.WorkerID}, OutcomeLost))
					}
				})
			}
		}
	}
	s.promised()
}

func (m *machines) cancelJob(t *testing.T) {
	s := m.statement(t, "CancelJob")
	cancel := func(id int64) func() error {
		return func() error { _, err := m.cat.CancelJob(ctx, id); return err }
	}
	for _, st := range JobStates {
		s.run("a "+string(st)+" job", func(c *step) {
			c.do(cancel(ct.Job(ctx, t, m.db, &ct.JobOpts{State: st}).ID), catalog.ErrJobTerminal)
		})
	}
	for _, j := range []struct {
		name  string
		tasks []ct.TaskOpts
	}{
		{"every task state", []ct.TaskOpts{{State: TaskDone}, {State: TaskRunning}, {Name: "r", State: TaskRunnable},
			{State: TaskBlocked, DependsOn: []string{"r"}}, {State: TaskCancelled}}},
		{"nothing running", []ct.TaskOpts{{State: TaskDone}, {State: TaskRunnable}}},
		{"failing, nothing running", []ct.TaskOpts{{State: TaskFailed}, {State: TaskRunnable}}},
		{"not started", []ct.TaskOpts{{Name: "r", State: TaskRunnable}, {State: TaskBlocked, DependsOn: []string{"r"}}}},
	} {
		s.run(j.name, func(c *step) { c.do(cancel(ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: j.tasks}).ID)) })
	}
	s.promised()
}

func (m *machines) retryJob(t *testing.T) {
	s := m.statement(t, "RetryJob")
	retry := func(id int64) func() error {
		return func() error { _, err := m.cat.RetryJob(ctx, id); return err }
	}
	for _, st := range JobStates {
		s.run("a "+string(st)+" job", func(c *step) {
			c.do(retry(ct.Job(ctx, t, m.db, &ct.JobOpts{State: st}).ID), catalog.ErrJobTerminal)
		})
	}
	for _, j := range []struct {
		name string
		opts ct.JobOpts
	}{
		{"failed, with dependents", ct.JobOpts{Tasks: []ct.TaskOpts{{Name: "a", State: TaskDone},
			{Name: "b", State: TaskFailed, DependsOn: []string{"a"}}, {Name: "c", State: TaskUnscheduled, DependsOn: []string{"b"}},
			{State: TaskUnscheduled, DependsOn: []string{"c"}}}}},
		{"cancelled, started", ct.JobOpts{CancelRequested: true, Tasks: []ct.TaskOpts{{Name: "a", State: TaskDone},
			{Name: "b", State: TaskCancelled, DependsOn: []string{"a"}}, {State: TaskCancelled, DependsOn: []string{"b"}}}}},
		{"cancelled, with a failed task", ct.JobOpts{CancelRequested: true,
			Tasks: []ct.TaskOpts{{State: TaskFailed}, {State: TaskCancelled}}}},
		{"cancelled after every task finished", ct.JobOpts{CancelRequested: true, Tasks: []ct.TaskOpts{{State: TaskDone}}}},
	} {
		s.run(j.name, func(c *step) {
			job := ct.Job(ctx, t, m.db, &j.opts)
			for _, task := range job.Tasks {
				if task.Token != 0 { // it ran: its attempt is on record
					ct.Attempt(ctx, t, m.db, &ct.AttemptOpts{Task: task, Outcome: Outcome(task.State)})
				}
			}
			c.do(retry(job.ID))
		})
	}
	s.promised()
}
