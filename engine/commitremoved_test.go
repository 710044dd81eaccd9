package engine_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task's COMMIT answer is lost and its node never answers again (the server was
// decommissioned); the operator removes the node from the catalog. The worker asked the node
// for as long as it took, which is now for ever: it must stop once the node is no longer
// registered with the conninfo the attempt used, and fail the task saying its effect is
// unknown (as the rescue does for a dead worker's attempt on a removed node), rather than
// keep the task running and its job unfinished while the worker lives.
func TestCommitLostOnANodeRemovedMeanwhileFails(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE hits (n int)`)
	id := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 5}}})
	removeHold := e.Proxy.AddRule(pgtest.Rule{Name: "hold", Match: regexp.MustCompile(`DISCARD ALL`), Action: pgtest.ActionStall})
	e.Proxy.AddRule(pgtest.Rule{Name: "status", Match: regexp.MustCompile(`pg_xact_status`), Action: pgtest.ActionError, Code: "08006"})
	e.Worker(engine.Config{Backoff: deckhandtype.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond}})
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, "the node commits the task")
	e.Proxy.DropAll()
	removeHold()
	testenv.Eventually(t, 20*time.Second, func() bool { return e.Proxy.Hits("status") >= 2 }, "the worker asks the node about the commit")
	if err := e.Client.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	job := e.Wait(id, 30*time.Second)
	d := detail(t, e.Env, id)
	if job.State != deckhandtype.JobFailed || d.Tasks[0].State != deckhandtype.TaskFailed || len(d.Attempts) != 1 ||
		d.Attempts[0].Message == nil || !strings.Contains(*d.Attempts[0].Message, "effect is unknown") {
		t.Fatalf("job %s: %s; want failed, its one attempt saying its effect is unknown", job.State, explain(d))
	}
}
