package catalog_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// A completion that claims in its own transaction wakes the other workers only for what it
// may leave to them: not for a dependent that runs anywhere, which its claim takes; yes for
// one bound to a node, which its claim may have passed.
func TestCompletionWakesOthersOnlyForWhatItMayLeave(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	node := ct.Node(ctx, t, cat.Pool, &ct.NodeOpts{})
	listener, err := pgx.ConnectConfig(ctx, cat.Pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx) //nolint:errcheck
	if _, err := listener.Exec(ctx, "LISTEN "+catalog.ChannelRunnable); err != nil {
		t.Fatal(err)
	}
	// woken completes the first task of a job whose second depends on it, claiming in the same
	// transaction, and reports whether other workers were woken: notifications arrive in commit
	// order, so one sent after the completion comes after any the completion sent.
	woken := func(dependent ct.TaskOpts) bool {
		t.Helper()
		w := ct.Worker(ctx, t, cat.Pool, nil)
		dependent.Name, dependent.DependsOn, dependent.State = "b", []string{"a"}, TaskBlocked
		job := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{Tasks: []ct.TaskOpts{{Name: "a", State: TaskRunning, WorkerID: w}, dependent}})
		a := job.Task("a")
		_, claimed, err := cat.CompleteAndClaim(ctx, []catalog.Result{{TaskID: a.ID, Token: a.Token, WorkerID: w, Outcome: OutcomeDone}}, w, 10)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("complete and claim: claimed %d (%v), want the dependent", len(claimed), err)
		}
		if _, err := cat.Pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, catalog.ChannelRunnable); err != nil {
			t.Fatal(err)
		}
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload != "sentinel" {
			// The completion's; the sentinel follows.
			if _, err := listener.WaitForNotification(ctx); err != nil {
				t.Fatal(err)
			}
			return true
		}
		return false
	}
	if woken(ct.TaskOpts{}) {
		t.Error("a dependent that runs anywhere, claimed by the completion's own transaction, woke the other workers")
	}
	if !woken(ct.TaskOpts{Node: node}) {
		t.Error("a dependent bound to a node did not wake the other workers")
	}
}
