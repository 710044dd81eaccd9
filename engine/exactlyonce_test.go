package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// The window that makes a task run twice elsewhere: the worker dies after the task's
// transaction committed on the node and before its result reached the catalog. A build of
// deckhand with the fault hook kills itself exactly there. The leader that rescues the task
// asks the node, finds the transaction committed, and records the task done: it never runs
// again. A task that runs outside a transaction cannot be asked about: it runs again, and its
// lost attempt says its effect was unknown.
func TestCommittedAttemptOfADeadWorkerIsNotRunAgain(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE hits (task text)`)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "in_tx", Node: "n1", SQL: "INSERT INTO hits VALUES ('in_tx')", MaxAttempts: 3},
		{Name: "no_tx", Node: "n1", SQL: "INSERT INTO hits VALUES ('no_tx')", MaxAttempts: 3,
			Transaction: ptr(false), DependsOn: []string{"in_tx"}},
	}})

	// Each faulty worker commits one task on the node and dies before recording it. The second
	// one, once the first's lease has expired, leads: it rescues the first task, which releases
	// the second, which it then runs.
	for range 2 {
		diesAfterNodeCommit(t, e, id)
	}
	e.Worker(engine.Config{})
	if job := e.Wait(id, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s: %s", job.State, explain(detail(t, e, id)))
	}

	count := func(task string) int {
		var n int
		if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits WHERE task = $1`, task).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("in_tx"); n != 1 {
		t.Errorf("the transactional task took effect %d times, want exactly once", n)
	}
	if n := count("no_tx"); n != 2 {
		t.Errorf("the task outside a transaction took effect %d times; with its worker killed after its effect, want 2 (at least once)", n)
	}
	d := detail(t, e, id)
	var inTx, noTx []deckhandtype.Attempt
	for _, a := range d.Attempts {
		if a.TaskName == "in_tx" {
			inTx = append(inTx, a)
		} else {
			noTx = append(noTx, a)
		}
	}
	if len(inTx) != 1 || inTx[0].Outcome != deckhandtype.OutcomeDone || inTx[0].Message == nil || !strings.HasPrefix(*inTx[0].Message, "recovered") {
		t.Errorf("the transactional task's attempts: %s; want one, done, recovered", explain(d))
	}
	if len(noTx) != 2 || noTx[0].Outcome != deckhandtype.OutcomeLost || noTx[0].Message == nil || !strings.Contains(*noTx[0].Message, "effect is unknown") {
		t.Errorf("the other task's attempts: %s; want a lost one whose effect is unknown, then done", explain(d))
	}
}
