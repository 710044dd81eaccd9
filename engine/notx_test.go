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

// A task with transaction: false sends its SQL as one query string, and PostgreSQL runs a
// string of several statements as one implicit transaction: VACUUM or CREATE INDEX
// CONCURRENTLY among other statements is refused (25001) although the task asked for no
// transaction. The failure says so and what to do, rather than only PostgreSQL's words, which
// read as if deckhand had opened a transaction; a statement alone runs.
func TestNoTransactionTaskOfSeveralStatementsSaysWhy(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE hits (n int)`)
	e.Worker(engine.Config{})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "alone", Node: "n1", SQL: "VACUUM hits", Transaction: ptr(false)},
		{Name: "several", Node: "n1", SQL: "INSERT INTO hits VALUES (1); VACUUM hits", Transaction: ptr(false), MaxAttempts: 1},
	}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s, want failed", job.State)
	}
	d := detail(t, e, id)
	for _, task := range d.Tasks {
		switch {
		case task.Name == "alone" && task.State != deckhandtype.TaskDone:
			t.Errorf("a lone VACUUM outside a transaction: %s, want done: %s", task.State, explain(d))
		case task.Name == "several" && (task.State != deckhandtype.TaskFailed || task.LastError == nil ||
			task.LastError.SQLState != "25001" || !strings.Contains(task.LastError.Message, "one implicit transaction") ||
			!strings.Contains(task.LastError.Message, "task of its own")):
			t.Errorf("VACUUM after another statement outside a transaction: %s %+v; want failed, saying why and what to do", task.State, task.LastError)
		}
	}
}

// An attempt released while it ran (pause --now, a worker's shutdown) was cancelled on its
// node: a transactional one rolled back, but one without a transaction may have taken effect
// in part or in full. Its attempt says so, as a lost attempt's does.
func TestReleasedAttemptWithoutATransactionSaysItsEffectIsUnknown(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Worker(engine.Config{Concurrency: 4})
	ids := map[bool]int64{}
	for _, inTx := range []bool{true, false} {
		ids[inTx] = submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "slow", Node: "n1", SQL: "SELECT pg_sleep(60)", Transaction: ptr(inTx)}}})
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(60)%' AND state = 'active' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n == 2
	}, "both tasks sleep on their node")
	for inTx, id := range ids {
		if _, err := e.Client.Pause(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		waitState(t, e, id, deckhandtype.JobPaused)
		d := detail(t, e, id)
		if len(d.Attempts) != 1 || d.Attempts[0].Outcome != deckhandtype.OutcomeReleased || d.Attempts[0].Message == nil {
			t.Fatalf("transaction %v: attempts after pause --now:%s; want one, released", inTx, explain(d))
		}
		if says := strings.Contains(*d.Attempts[0].Message, "effect is unknown"); says == inTx {
			t.Errorf("transaction %v: the released attempt says %q", inTx, *d.Attempts[0].Message)
		}
	}
}
