package catalog_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// queueOnOneSlot registers node n of one slot and worker 1, and queues four SQL tasks on n.
func queueOnOneSlot(t *testing.T, cat *catalog.Catalog) {
	t.Helper()
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ('n', 'host=/nonexistent', 'n', 'primary', 1);
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 4) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql', 'n', 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j, generate_series(1, 4) g`); err != nil {
		t.Fatal(err)
	}
}

// A task claimed ahead holds none of its node's slots until the result of the task whose slot
// it took hands it one; from then on it holds it, until its own result frees it.
func TestTasksClaimedAheadTakeSlotsOnlyWhenHandedOne(t *testing.T) {
	cat := migratedCatalog(t)
	queueOnOneSlot(t, cat)
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

// A batch whose results each hand their slot to a task claimed ahead costs the same per
// result whatever its size: the hand-over finds each task by its key. Planned generically
// under statistics taken while no task ran (a catalog of finished history), it once scanned
// every active task for each result: 400 results, 160,000 rows compared.
func TestHandingOverSlotsIsLinearInTheBatch(t *testing.T) {
	const slots = 400
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, strings.ReplaceAll(`
		INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ('n', 'host=/nonexistent', 'n', 'primary', $1);
		INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 10000, 'infinity');
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total, tasks_done) VALUES ('history', 'noop', 20000, 20000) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state, attempts, runs, finished_at)
		SELECT j.id, 'old' || g, 'noop', 'app', 1, '1 hour', 'done', 1, 1, now() FROM j, generate_series(1, 20000) g;
		ANALYZE deckhand.task;
		WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'sql', 2 * $1 + 1) RETURNING id)
		INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		SELECT j.id, 't' || g, 'sql', 'n', 'app', 'SELECT 1', 3, '1 hour', 'runnable' FROM j, generate_series(1, 2 * $1 + 1) g`, "$1", strconv.Itoa(slots))); err != nil {
		t.Fatal(err)
	}
	const worker = 1
	running, err := cat.Claim(ctx, worker, slots)
	if err != nil || len(running) != slots {
		t.Fatalf("claimed %d tasks (%v), want %d", len(running), err, slots)
	}
	// The first ends: its slot goes to one more task, and as many again are claimed ahead.
	_, got, err := cat.CompleteAndClaimAhead(ctx, []catalog.Result{{TaskID: running[0].ID, Token: running[0].Token,
		WorkerID: worker, Outcome: deckhandtype.OutcomeDone}}, worker, slots+1, catalog.Ahead{"n": slots})
	if err != nil || len(got) != slots+1 || got[0].Queued || !got[slots].Queued {
		t.Fatalf("claimed %d tasks (%v), want one into the free slot and %d ahead", len(got), err, slots)
	}
	running = append(running[1:], got[0])
	var results []catalog.Result
	for i, task := range running {
		results = append(results, catalog.Result{TaskID: task.ID, Token: task.Token, WorkerID: worker,
			Outcome: deckhandtype.OutcomeDone, HandedTo: got[i+1].ID, HandedToken: got[i+1].Token})
	}
	args, err := catalog.CompleteArgs(results)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := cat.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Prepared, as the completer's statement is: the session's plan is generic.
	sql, params, err := pgx.StrictNamedArgs(args).RewriteQuery(ctx, conn.Conn(), catalog.CompleteSQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := conn.Conn().Prepare(ctx, "handing_over", sql)
	if err != nil {
		t.Fatal(err)
	}
	// EXECUTE takes its arguments as literals, which the server writes from the values.
	literals := make([]string, len(params))
	for i, p := range params {
		var typ string
		if err := conn.QueryRow(ctx, `SELECT $1::oid::regtype::text`, prepared.ParamOIDs[i]).Scan(&typ); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.quote_nullable($1::`+typ+`) || '::`+typ+`'`, p).Scan(&literals[i]); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE handing_over("+strings.Join(literals, ", ")+")").Scan(&out); err != nil {
		t.Fatal(err)
	}
	var tree []map[string]any
	if err := json.Unmarshal(out, &tree); err != nil || len(tree) != 1 {
		t.Fatalf("EXPLAIN: %v", err)
	}
	if compared := rowsCompared(tree[0]["Plan"].(map[string]any)); compared > 10*slots {
		t.Errorf("%d results handing slots over compared %.0f rows that did not match", slots, compared)
		var b strings.Builder
		outline(&b, tree[0]["Plan"].(map[string]any), "")
		t.Log(b.String())
	}
	var queued int
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE queued) FROM deckhand.task WHERE state = 'running'`).Scan(&queued); err != nil || queued != 0 {
		t.Errorf("%d tasks still queued after every one was handed a slot (%v)", queued, err)
	}
}

// rowsCompared is the number of rows every node of a plan read and discarded, over all its
// loops.
func rowsCompared(node map[string]any) float64 {
	loops, _ := node["Actual Loops"].(float64)
	joined, _ := node["Rows Removed by Join Filter"].(float64)
	filtered, _ := node["Rows Removed by Filter"].(float64)
	n := (joined + filtered) * loops
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsCompared(c.(map[string]any))
	}
	return n
}

// A batch may carry both the result of a task that handed its slot to one claimed ahead and
// that one's own result: both end, and the slot is free for the next claim.
func TestHandedTaskEndingInTheSameBatch(t *testing.T) {
	cat := migratedCatalog(t)
	queueOnOneSlot(t, cat)
	const worker = 1
	first, err := cat.Claim(ctx, worker, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("claimed %d tasks (%v), want 1", len(first), err)
	}
	done := func(task deckhandtype.ClaimedTask) catalog.Result {
		return catalog.Result{TaskID: task.ID, Token: task.Token, WorkerID: worker, Outcome: deckhandtype.OutcomeDone}
	}
	_, got, err := cat.CompleteAndClaimAhead(ctx, []catalog.Result{done(first[0])}, worker, 10, catalog.Ahead{"n": 1})
	if err != nil || len(got) != 2 || got[0].Queued || !got[1].Queued {
		t.Fatalf("claimed %+v (%v), want one task into the free slot and one ahead", got, err)
	}
	// b hands its slot to c, and c ends too before the batch is written.
	b, c := done(got[0]), done(got[1])
	b.HandedTo, b.HandedToken = c.TaskID, c.Token
	if _, err := cat.Complete(ctx, []catalog.Result{b, c}); err != nil {
		t.Fatal(err)
	}
	var ended, queued int
	if err := cat.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE queued) FROM deckhand.task`).Scan(&ended, &queued); err != nil {
		t.Fatal(err)
	}
	if ended != 3 || queued != 0 {
		t.Errorf("after b and c ended in one batch: %d tasks done and %d queued, want 3 and 0", ended, queued)
	}
	if next, err := cat.Claim(ctx, worker, 10); err != nil || len(next) != 1 || next[0].Queued {
		t.Errorf("claimed %+v (%v) after b and c ended, want the last task, into the free slot", next, err)
	}
}
