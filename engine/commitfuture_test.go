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

// The connection breaks as a task's COMMIT is sent, and the node the conninfo reaches from
// then on is another server (a standby promoted in a failover, which never received the
// transaction): asked what became of the transaction, it says the id is in the future. No
// server that committed a transaction says that of it, so the transaction did not commit
// there, and the task must run again rather than the worker ask for ever (its job would
// never end, and neither a cancel nor the task's timeout would end the asking).
func TestCommitLostOnAServerThatNeverSawTheTransactionRunsAgain(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE hits (n int)`)
	// The COMMIT never reaches the node: the connection breaks with it.
	e.Proxy.AddRule(pgtest.Rule{Name: "commit", Match: regexp.MustCompile(`^COMMIT$`), Action: pgtest.ActionDrop, Times: 1})
	// The server the node's conninfo reaches now never saw the transaction.
	e.Proxy.AddRule(pgtest.Rule{Name: "status", Match: regexp.MustCompile(`pg_xact_status`), Action: pgtest.ActionError,
		Code: "22023", Message: "transaction ID 4000000000 is in the future"})
	id := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 5}}})
	e.Worker(engine.Config{Backoff: deckhandtype.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond}})
	testenv.Eventually(t, 20*time.Second, func() bool { return e.Proxy.Hits("status") >= 1 }, "the worker asks the node about the commit")
	job := e.Wait(id, 30*time.Second)
	var n int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, the task took effect %d times; want finished, once: %s", job.State, n, explain(detail(t, e.Env, id)))
	}
	if hits := e.Proxy.Hits("commit"); hits != 1 {
		t.Errorf("the COMMIT was dropped %d times, want 1", hits)
	}
}
