package engine_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task's COMMIT reaches the node and its answer is lost; before the worker can ask the node
// what became of it, the submitter's membership in the owner role is revoked there (someone
// leaving the team). Asking as the owner is refused from then on, and would be for ever: the
// worker must still learn that the transaction committed (pg_xact_status needs no privilege)
// and record the task done once, rather than ask in vain while the job never ends.
func TestCommitLostThenOwnerRefusedIsStillSettled(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := e.Node("n1")
	owner := e.Role("owner")
	sub, c := e.Submitter("sub", owner)
	e.NodeExec(db, `CREATE TABLE hits (n int)`)
	e.NodeExec(db, `GRANT INSERT, SELECT ON hits TO `+pgx.Identifier{owner}.Sanitize())
	id, err := c.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", Owner: owner, SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	removeHold := e.Proxy.AddRule(pgtest.Rule{Name: "hold", Match: regexp.MustCompile(`DISCARD ALL`), Action: pgtest.ActionStall})
	unreachable := e.Proxy.AddRule(pgtest.Rule{Name: "status", Match: regexp.MustCompile(`pg_xact_status`), Action: pgtest.ActionError, Code: "08006"})
	e.Worker(engine.Config{Backoff: deckhandtype.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond}})
	count := func() int {
		var n int
		if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return count() == 1 }, "the node commits the task")
	e.Proxy.DropAll()
	removeHold()
	testenv.Eventually(t, 20*time.Second, func() bool { return e.Proxy.Hits("status") >= 1 }, "the worker asks the node about the commit")
	e.NodeExec("postgres", "REVOKE "+pgx.Identifier{owner}.Sanitize()+" FROM "+pgx.Identifier{sub}.Sanitize())
	unreachable()
	job := e.Wait(id, 30*time.Second)
	if n := count(); n != 1 || job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, the task took effect %d times; want finished, once: %s", job.State, n, explain(detail(t, e.Env, id)))
	}
}
