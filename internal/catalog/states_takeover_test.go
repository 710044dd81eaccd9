package catalog_test

import (
	"testing"
	"time"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// TakeOverCleanup hands the pending or due records of a failed operation to a running, alive
// operation of the same task, all or none.
func TestTakeOverCleanupFollowsTheStateMachine(t *testing.T) {
	m := newMachines(t)
	s := m.statement(t, "TakeOverCleanup")
	cases := []struct {
		name string
		seed func(t *testing.T) (from, to int64)
		ok   bool
	}{
		{"a running attempt of the same task", func(t *testing.T) (int64, int64) {
			task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
			from := ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task, State: OperationFailed})
			return from, ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task})
		}, true},
		{"a running attempt of another task", func(t *testing.T) (int64, int64) {
			other := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
			from := ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: other.JobID, Task: &other, State: OperationFailed})
			task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
			return from, ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task})
		}, false},
		{"an attempt whose lease expired", func(t *testing.T) (int64, int64) {
			w := ct.Worker(ctx, t, m.db, &ct.WorkerOpts{LeaseExpiresAt: m.now.Add(-time.Minute)})
			task := ct.Job(ctx, t, m.db, &ct.JobOpts{Tasks: []ct.TaskOpts{{State: TaskRunning, WorkerID: w}}}).Tasks[0]
			from := ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task, State: OperationFailed})
			return from, ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task})
		}, false},
		{"from a running operation", func(t *testing.T) (int64, int64) {
			task := ct.Job(ctx, t, m.db, &ct.JobOpts{State: JobRunning}).Tasks[0]
			from := ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task})
			return from, ct.Operation(ctx, t, m.db, &ct.OperationOpts{JobID: task.JobID, Task: &task})
		}, false},
	}
	for _, k := range cases {
		for _, st := range recordStates {
			s.run(k.name+", a record "+string(st), func(c *step) {
				from, to := k.seed(t)
				kept := ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: from, State: CleanupDue})
				id := ct.CleanupRecord(ctx, t, m.db, &ct.CleanupRecordOpts{OperationID: from, State: st})
				var ok bool
				after := c.do(func() (err error) {
					ok, err = m.cat.TakeOverCleanup(ctx, from, to, []int64{kept, id})
					return err
				})
				live := st == CleanupPending || st == CleanupDue || st == CleanupInUse || st == CleanupRetrying || st == CleanupPinned
				if want := k.ok && live; ok != want {
					t.Errorf("%s: taken over %v, want %v", c.name, ok, want)
				}
				for _, r := range []int64{kept, id} {
					if got := after.CleanupRecords[r].State; ok && got != CleanupPending {
						t.Errorf("%s: record %d taken over is %s, want pending", c.name, r, got)
					}
				}
				var moved int
				if err := m.db.QueryRow(ctx, `SELECT count(*) FROM deckhand.cleanup_record WHERE operation_id = $1`, to).Scan(&moved); err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{true: 2}[ok]; moved != want {
					t.Errorf("%s: %d records under the taking operation, want %d", c.name, moved, want)
				}
				if !ok && after.CleanupRecords[kept].State != CleanupDue {
					t.Errorf("%s: a record not taken over changed to %s", c.name, after.CleanupRecords[kept].State)
				}
			})
		}
	}
	s.promised()
}
