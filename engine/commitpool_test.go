package engine_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A worker's sessions on a node, as one owner, are as many as its concurrency, and the task
// whose COMMIT answer was lost asks the node through them what became of it. With
// `serve --concurrency 1` (or as many lost answers at once as the worker runs tasks there:
// the node restarted under them) every session is held by a task that waits for one to ask:
// the asking never got a session, and went on for ever. The task must be settled, once.
func TestLostCommitIsAskedAboutWithConcurrencyOne(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE hits (n int)`)
	id := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 5}}})
	removeHold := e.Proxy.AddRule(pgtest.Rule{Name: "hold", Match: regexp.MustCompile(`DISCARD ALL`), Action: pgtest.ActionStall})
	e.Worker(engine.Config{Concurrency: 1})
	count := func() int {
		var n int
		if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return count() == 1 }, "the node commits the task")
	e.Proxy.DropAll() // the answer is lost with the connection
	removeHold()
	job := e.Wait(id, 30*time.Second)
	if n := count(); n != 1 || job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, the task took effect %d times; want finished, once: %s", job.State, n, explain(detail(t, e.Env, id)))
	}
}
