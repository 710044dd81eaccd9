package engine_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// On a node that runs one task at a time, a higher priority's tasks are claimed before those
// of jobs submitted earlier, and waiting counts as priority does: a job of low priority that
// has waited long enough goes before both.
func TestPrioritiesOrderClaimsWithoutStarving(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	db := e.AddNode("n1", 1)
	e.Exec(db, `CREATE TABLE log (seq serial, job text)`)
	job := func(name string, priority int) int64 {
		var tasks []spec.Task
		for i := range 3 {
			tasks = append(tasks, spec.Task{Name: name + string(rune('a'+i)), Node: "n1",
				SQL: "INSERT INTO log (job) VALUES ('" + name + "')"})
		}
		return submit(t, e, &spec.Job{Description: name, Priority: priority, Tasks: tasks})
	}
	low := job("low", 0)
	high := job("high", 50)
	old := job("old", -10)
	// The old job was submitted 70 minutes ago: its place is that of a job of priority 0
	// submitted an hour ago, before the job of priority 50 submitted now.
	e.Exec(e.DB, `UPDATE deckhand.job SET created_at = created_at - interval '70 minutes' WHERE id = $1`, old)
	e.Exec(e.DB, `UPDATE deckhand.task SET claim_key = claim_key - interval '70 minutes' WHERE job_id = $1`, old)

	if j := detail(t, e, high); j.Priority != 50 {
		t.Errorf("job %d shows priority %d, want 50", high, j.Priority)
	}
	e.Worker(engine.Config{Concurrency: 4})
	for _, id := range []int64{low, high, old} {
		if j := e.Wait(id, 30*time.Second); j.State != deckhandtype.JobFinished {
			t.Fatalf("job %d: %s", id, j.State)
		}
	}
	rows, _ := e.Pool(db).Query(ctx, `SELECT job FROM log ORDER BY seq`)
	order, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"old", "old", "old", "high", "high", "high", "low", "low", "low"}
	if !slices.Equal(order, want) {
		t.Errorf("tasks ran in the order %q, want %q", order, want)
	}
}

// Priorities outside -100..100 are refused before anything is written.
func TestPriorityIsBounded(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	e.AddNode("n1", 1)
	for _, p := range []int{-101, 101} {
		_, err := e.Client.Submit(ctx, &spec.Job{Priority: p, Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}})
		if !engine.IsInvalid(err) {
			t.Errorf("priority %d: %v, want a refusal of the input", p, err)
		}
	}
	// SQL users get the same bound from the catalog.
	var id int64
	err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT deckhand.submit('{"priority": 1.5, "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"}]}')`).Scan(&id)
	if err == nil {
		t.Error("deckhand.submit took priority 1.5")
	}
}
