package engine_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// The connection breaks as a task's COMMIT is sent, and the node the conninfo reaches from
// then on is another server (a standby promoted in a failover, which never received the
// transaction): asked what became of the transaction, it says the id is in the future. No
// server that committed a transaction says that of it, so the transaction did not commit
// there, and the task must run again rather than the worker ask for ever (its job would
// never end, and neither a cancel nor the task's timeout would end the asking).
func TestCommitLostOnAServerThatNeverSawTheTransactionRunsAgain(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	// The COMMIT never reaches the node: the connection breaks with it.
	e.Proxy.AddRule(pgtest.Rule{Name: "commit", Match: regexp.MustCompile(`^COMMIT$`), Action: pgtest.ActionDrop, Times: 1})
	// The server the node's conninfo reaches now never saw the transaction.
	e.Proxy.AddRule(pgtest.Rule{Name: "status", Match: regexp.MustCompile(`pg_xact_status`), Action: pgtest.ActionError,
		Code: "22023", Message: "transaction ID 4000000000 is in the future"})
	id := submit(t, e.Env, oneHitJob())
	e.Worker(engine.Config{Backoff: quickAsking})
	waitAsked(t, e, 1)
	wantFinishedOnce(t, e, db, id, e.Wait(id, 30*time.Second))
	if hits := e.Proxy.Hits("commit"); hits != 1 {
		t.Errorf("the COMMIT was dropped %d times, want 1", hits)
	}
}
