package catalog_test

import (
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A task claimed ahead holds none of its node's slots until the result of the task whose slot
// it took hands it one; from then on it holds it, until its own result frees it.
func TestTasksClaimedAheadTakeSlotsOnlyWhenHandedOne(t *testing.T) {
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ('n', 'host=/nonexistent', 'n', 'primary', 1);
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 4) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql', 'n', 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j, generate_series(1, 4) g`); err != nil {
		t.Fatal(err)
	}
	const worker = 1
	claim := func(what string, want int) []deckhandtype.ClaimedTask {
		t.Helper()
		got, err := cat.Claim(ctx, worker, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Fatalf("%s: claimed %d tasks, want %d", what, len(got), want)
		}
		return got
	}
	done := func(task deckhandtype.ClaimedTask, handedTo *deckhandtype.ClaimedTask) catalog.Result {
		r := catalog.Result{TaskID: task.ID, Token: task.Token, WorkerID: worker, Outcome: deckhandtype.OutcomeDone}
		if handedTo != nil {
			r.HandedTo, r.HandedToken = handedTo.ID, handedTo.Token
		}
		return r
	}

	a := claim("the first claim", 1)[0]
	if a.Queued {
		t.Fatal("a task claimed into a free slot is marked queued")
	}
	// a ends: its slot goes to the next task, and one more is claimed ahead.
	_, got, err := cat.CompleteAndClaimAhead(ctx, []catalog.Result{done(a, nil)}, worker, 10, catalog.Ahead{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Queued || !got[1].Queued {
		t.Fatalf("after a: claimed %+v, want one task into the free slot and one ahead", got)
	}
	b, c := got[0], got[1]
	// c, claimed ahead, holds no slot, but b holds the only one: nothing more is claimed.
	claim("with b running and c ahead", 0)
	// b ends and hands its slot to c: still nothing to claim.
	if _, err := cat.Complete(ctx, []catalog.Result{done(b, &c)}); err != nil {
		t.Fatal(err)
	}
	var queued bool
	if err := cat.Pool.QueryRow(ctx, `SELECT queued FROM deckhand.task WHERE id = $1`, c.ID).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued {
		t.Fatal("c is still marked queued after b handed it its slot")
	}
	claim("with c holding b's slot", 0)
	// c ends with nobody to hand the slot to: the last task gets it.
	if _, err := cat.Complete(ctx, []catalog.Result{done(c, nil)}); err != nil {
		t.Fatal(err)
	}
	if d := claim("after c", 1)[0]; d.Queued {
		t.Fatal("the last task, claimed into c's freed slot, is marked queued")
	}
}
