package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// The statements of operations and cleanup records, from operations and records in every state.
func TestCleanupStatementsFollowTheStateMachines(t *testing.T) {
	m := newMachines(t)
	t.Run("BeginOperation", m.beginOperation)
	t.Run("FinishOperation", m.finishOperation)
	t.Run("DecideOperations", m.decideOperations)
	t.Run("RegisterCleanup", m.registerCleanup)
	t.Run("ForgetCleanup", m.forgetCleanup)
	t.Run("ClaimCleanup", m.claimCleanup)
	t.Run("MarkNodeRemoved", m.markNodeRemoved)
	t.Run("RetryCleanupRecord", m.retryCleanupRecord)
	t.Run("ForgetCleanupRecord", m.forgetCleanupRecord)
}

// recordStates are the states a record is stored in, and the reasons a due record waits.
var recordStates = []CleanupState{CleanupPending, CleanupDue, CleanupInUse, CleanupRetrying, CleanupPinned,
	CleanupRemoved, CleanupForgotten, CleanupFailed, CleanupNodeRemoved}

// operationKind seeds an operation in a state, of an attempt or of a job, alive or not.
type operationKind struct {
	name string
	seed func(m *machines, t *testing.T, state OperationState) int64
}

// operation seeds an operation of the kind named.
func (m *machines) operation(t *testing.T, kind string, state OperationState) int64 {
	for _, k := range operationKinds {
		if k.name == kind {
			return k.seed(m, t, state)
		}
	}
	panic("no operation kind " + kind)
}

// operationKinds are the operations the cleanup statements meet.
var operationKinds = []operationKind{
	{"an attempt's, running", func(m *machines, t *testing.T, state OperationState) int64 {
		task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task, State: state})
	}},
	{"an attempt's, lease expired", func(m *machines, t *testing.T, state OperationState) int64 {
		w := ct.Worker(ctx, t, m.db, &ct.WorkerOpts{LeaseExpiresAt: m.now.Add(-time.Minute)})
		task := ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskRunning, WorkerID: w}}}).Tasks[0]
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task, State: state})
	}},
	{"an attempt's, over", func(m *machines, t *testing.T, state OperationState) int64 {
		task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobFinished}).Tasks[0]
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task, State: state})
	}},
	{"an attempt's, task deleted", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: -1, Task: &ct.TaskRow{ID: -1, Token: 1}, State: state})
	}},
	{"a job's, running", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).ID, State: state})
	}},
	{"a job's, finished", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobFinished}).ID, State: state})
	}},
	{"a job's, failed", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobFailed}).ID, State: state})
	}},
	{"a job's, cancelled", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobCancelled}).ID, State: state})
	}},
	{"a job's, job deleted", func(m *machines, t *testing.T, state OperationState) int64 {
		return ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: -1, State: state})
	}},
}

// withRecords gives an operation one pending record of each policy, and records in the
// states an operation's records reach after it ended.
func (m *machines) withRecords(t *testing.T, op int64) {
	for _, p := range []Policy{PolicyOnFailure, PolicyAlways, PolicyDeferredOnSuccess} {
		ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, Policy: p})
	}
	for _, st := range []CleanupState{CleanupDue, CleanupFailed, CleanupRemoved} {
		ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st})
	}
}

func (m *machines) beginOperation(t *testing.T) {
	s := m.statement(t, "BeginOperation")
	for _, st := range TaskStates {
		s.run("an attempt of a "+string(st)+" task", func(c *step) {
			task := ct.Job(ctx, t, m.db, &ct.JobOpts{CancelRequested: st == TaskCancelling, Tasks: []ct.TaskOpts{{State: st}}}).Tasks[0]
			var op int64
			after := c.do(func() (err error) {
				op, err = m.cat.BeginOperation(ctx, catalog.NewOperation{JobID: task.JobID, TaskID: task.ID, Token: task.Token, Owner: "app"})
				return err
			}, catalog.ErrOperationEnded)
			if running := st == TaskRunning || st == TaskCancelling; running != (after.Operations[op].State == OperationRunning) {
				t.Errorf("%s: began operation %d: %+v", c.name, op, after.Operations)
			}
		})
	}
	for _, st := range JobStates {
		s.run("a "+string(st)+" job", func(c *step) {
			job := ct.Job(ctx, t, m.db, &ct.JobOpts{State: st})
			var op int64
			after := c.do(func() (err error) {
				op, err = m.cat.BeginOperation(ctx, catalog.NewOperation{JobID: job.ID, Owner: "app"})
				return err
			}, catalog.ErrOperationEnded)
			if !st.Terminal() != (after.Operations[op].State == OperationRunning) {
				t.Errorf("%s: began operation %d: %+v", c.name, op, after.Operations)
			}
		})
	}
	s.promised()
}

func (m *machines) finishOperation(t *testing.T) {
	s := m.statement(t, "FinishOperation")
	for _, kind := range operationKinds {
		for _, st := range []OperationState{OperationRunning, OperationSucceeded, OperationFailed} {
			for _, succeeded := range []bool{true, false} {
				s.run(kind.name+", "+string(st)+", success "+map[bool]string{true: "yes", false: "no"}[succeeded], func(c *step) {
					op := kind.seed(m, t, st)
					m.withRecords(t, op)
					c.do(func() error { return m.cat.FinishOperation(ctx, op, succeeded, "") }, catalog.ErrOperationEnded)
				})
			}
		}
	}
	s.promised()
}

func (m *machines) decideOperations(t *testing.T) {
	s := m.statement(t, "DecideOperations")
	for _, kind := range operationKinds {
		for _, st := range []OperationState{OperationRunning, OperationSucceeded, OperationFailed} {
			s.run(kind.name+", "+string(st), func(c *step) {
				m.withRecords(t, kind.seed(m, t, st))
				c.do(func() error { _, err := m.cat.DecideOperations(ctx); return err })
			})
		}
	}
	s.promised()
}

func (m *machines) registerCleanup(t *testing.T) {
	s := m.statement(t, "RegisterCleanup")
	r := CleanupResource{Type: ResourceTable, Location: "public", Name: "scaffold"}
	for _, kind := range operationKinds {
		for _, st := range recordStates {
			s.run(kind.name+", an earlier record "+string(st), func(c *step) {
				old := m.operation(t, "a job's, finished", OperationSucceeded)
				ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: old, State: st, Location: r.Location, Name: r.Name})
				op := kind.seed(m, t, OperationRunning)
				var id int64
				after := c.do(func() (err error) {
					id, err = m.cat.RegisterCleanup(ctx, op, r, PolicyAlways)
					if busy := (*catalog.ResourceBusyError)(nil); errors.As(err, &busy) {
						return nil // the earlier record is live
					}
					return err
				}, catalog.ErrOperationEnded)
				if id != 0 && after.CleanupRecords[id].State != CleanupPending {
					t.Errorf("%s: registered record %d is %s", c.name, id, after.CleanupRecords[id].State)
				}
			})
		}
	}
	s.promised()
}

func (m *machines) forgetCleanup(t *testing.T) {
	s := m.statement(t, "ForgetCleanup")
	for _, st := range recordStates {
		s.run("a record "+string(st), func(c *step) {
			op := m.operation(t, "an attempt's, running", OperationRunning)
			id := ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st})
			c.do(func() error { return m.cat.ForgetCleanup(ctx, op, id) }, catalog.ErrOperationEnded)
		})
	}
	s.promised()
}

func (m *machines) claimCleanup(t *testing.T) {
	s := m.statement(t, "ClaimCleanup")
	outcomes := []CleanupState{CleanupRemoved, CleanupFailed, CleanupNodeRemoved, CleanupInUse, CleanupRetrying, CleanupPinned}
	for _, st := range recordStates {
		for _, found := range outcomes {
			s.run("a record "+string(st)+", found "+string(found), func(c *step) {
				op := m.operation(t, "a job's, finished", OperationSucceeded)
				ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st})
				c.do(func() error {
					_, _, err := m.cat.ClaimCleanup(ctx, catalog.CleanupClaim{IgnoreBackoff: true},
						func(context.Context, *catalog.DueRecord) catalog.CleanupOutcome {
							return catalog.CleanupOutcome{State: found, Backoff: time.Minute}
						})
					return err
				})
			})
		}
	}
	s.promised()
}

func (m *machines) markNodeRemoved(t *testing.T) {
	s := m.statement(t, "MarkNodeRemoved")
	for _, st := range recordStates {
		for _, registered := range []bool{true, false} {
			s.run("a record "+string(st)+map[bool]string{true: " of a node", false: " of a removed node"}[registered], func(c *step) {
				node := "gone"
				if registered {
					node = ct.Node(ctx, t, m.db, &ct.NodeOpts{})
				}
				op := m.operation(t, "a job's, finished", OperationSucceeded)
				ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st, Node: node})
				c.do(func() error { _, err := m.cat.MarkNodeRemoved(ctx); return err })
			})
		}
	}
	s.promised()
}

func (m *machines) retryCleanupRecord(t *testing.T) {
	s := m.statement(t, "RetryCleanupRecord")
	for _, st := range recordStates {
		s.run("a record "+string(st), func(c *step) {
			op := m.operation(t, "a job's, finished", OperationSucceeded)
			id := ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st})
			c.do(func() error { return m.cat.RetryCleanupRecord(ctx, id) }, catalog.ErrInvalid)
		})
	}
	s.promised()
}

func (m *machines) forgetCleanupRecord(t *testing.T) {
	s := m.statement(t, "ForgetCleanupRecord")
	for _, opState := range []OperationState{OperationRunning, OperationSucceeded} {
		for _, st := range recordStates {
			s.run("a record "+string(st)+" of an operation "+string(opState), func(c *step) {
				op := m.operation(t, "a job's, running", opState)
				id := ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: op, State: st})
				c.do(func() error { return m.cat.ForgetCleanupRecord(ctx, id) }, catalog.ErrInvalid)
			})
		}
	}
	s.promised()
}
