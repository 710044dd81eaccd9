package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task that seeds random() (setseed, which DISCARD ALL leaves as it is) does not make the
// random() of the next task in the same pooled session, whoever submitted it, predictable.
func TestPooledSessionForgetsTheSeed(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 1)
	e.Exec(db, `CREATE TABLE seen (task text, pid int, r float8)`)
	e.Worker(engine.Config{Concurrency: 1})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: `SELECT setseed(0.5); INSERT INTO public.seen VALUES ('a', pg_backend_pid(), NULL)`, MaxAttempts: 1},
		{Name: "b", Node: "n1", SQL: `INSERT INTO public.seen VALUES ('b', pg_backend_pid(), random())`, MaxAttempts: 1, DependsOn: []string{"a"}},
	}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job = %+v, want finished; attempts: %s", job, explain(detail(t, e, id)))
	}
	var pa, pb int
	var rb, predicted float64
	pool := e.Pool(db)
	if err := pool.QueryRow(ctx, `SELECT (SELECT pid FROM seen WHERE task = 'a'), (SELECT pid FROM seen WHERE task = 'b'),
		(SELECT r FROM seen WHERE task = 'b')`).Scan(&pa, &pb, &rb); err != nil {
		t.Fatal(err)
	}
	if pa != pb {
		t.Fatalf("tasks ran in backends %d and %d: the test needs them to share a session", pa, pb)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT setseed(0.5)`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT random()`).Scan(&predicted); err != nil {
		t.Fatal(err)
	}
	if rb == predicted {
		t.Errorf("task b's random() was %v, predicted by task a's seed", rb)
	}
}
