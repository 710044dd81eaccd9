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
