package engine_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// nodeOfItsOwn starts a cluster for the test, with database db holding table hits, and
// registers it as node n1.
func nodeOfItsOwn(t *testing.T, e *testenv.Env, db string) *pgcluster.Cluster {
	t.Helper()
	c := pgtest.New(t, pgcluster.Options{})
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE hits (n int)`); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "n1", DSN: c.DSN(db, pgcluster.Superuser)}); err != nil {
		t.Fatal(err)
	}
	return c
}

// failOver promotes standby once it has replayed all that primary wrote, and shuts primary
// down: the standby then serves, on a timeline of its own, everything primary committed.
func failOver(t *testing.T, primary, standby *pgcluster.Cluster) {
	t.Helper()
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if err := primary.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Exec(ctx, "postgres", `SELECT pg_promote()`); err != nil {
		t.Fatal(err)
	}
}

// effectUnknown checks that the job failed with the effect of its one task applied once and its
// one attempt saying that the effect is unknown, with why (want), and how to run it again.
func effectUnknown(t *testing.T, e *testenv.Env, id int64, c *pgcluster.Cluster, db, want string) {
	t.Helper()
	job := e.Wait(id, 60*time.Second)
	conn := pgtest.Connect(t, c.DSN(db, pgcluster.Superuser))
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	d := detail(t, e, id)
	if job.State != deckhandtype.JobFailed || n != 1 {
		t.Fatalf("job %s, the task took effect %d times; want failed, once: %s", job.State, n, explain(d))
	}
	if len(d.Attempts) != 1 || d.Attempts[0].Outcome != deckhandtype.OutcomeFailed || d.Attempts[0].Message == nil {
		t.Fatalf("attempts: %s; want one, failed", explain(d))
	}
	msg := *d.Attempts[0].Message
	for _, w := range []string{"effect is unknown", want, "deckhand job retry"} {
		if !strings.Contains(msg, w) {
			t.Errorf("the attempt's message %q does not say %q", msg, w)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("the attempt's message %q is not one line", msg)
	}
}

// A worker dies right after its task's transaction committed on the node's primary; then
// the primary goes down and its standby, which had replayed the commit, is promoted and the
// node's conninfo now reaches it. The promoted server is on a timeline of its own: it shares
// the old primary's history only up to the point it had replayed, and may have given out the
// same transaction id since to another transaction. Its answer cannot tell which, so the
// leader's rescue neither records the task done nor runs it again: the task fails, saying
// that its effect is unknown because the node failed over, and how to run it again.
func TestRescueAfterAFailoverLeavesTheEffectUnknown(t *testing.T) {
	e, standby, id := failedOverAfterNodeCommit(t, false)
	effectUnknown(t, e, id, standby, "shop", "failed over")
}

// The same with an attempt recorded as before timelines were (none stored): it is judged on
// the status alone, as it was, and the promoted standby says committed.
func TestRescueAfterAFailoverOfAnAttemptWithoutTimeline(t *testing.T) {
	e, _, id := failedOverAfterNodeCommit(t, true)
	if job := e.Wait(id, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s: %s; want finished, as recovered", job.State, explain(detail(t, e, id)))
	}
	if d := detail(t, e, id); len(d.Attempts) != 1 || d.Attempts[0].Message == nil || !strings.HasPrefix(*d.Attempts[0].Message, "recovered") {
		t.Errorf("attempts: %s; want one, recovered", explain(d))
	}
}

// failedOverAfterNodeCommit kills a worker right after its task committed on n1's primary,
// fails n1 over to a standby that replayed the commit, and starts a worker, which leads and
// rescues the attempt. legacy erases what the attempt recorded beside its transaction id.
func failedOverAfterNodeCommit(t *testing.T, legacy bool) (*testenv.Env, *pgcluster.Cluster, int64) {
	t.Helper()
	e := testenv.New(t)
	const db = "shop"
	primary := nodeOfItsOwn(t, e, db)
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 3}}})
	diesAfterNodeCommit(t, e, id)
	if legacy {
		e.Exec(e.DB, `UPDATE deckhand.task SET xid_timeline = NULL, xid_system = NULL WHERE job_id = $1`, id)
	}

	failOver(t, primary, standby)
	if _, err := e.Client.PutNode(ctx, deckhandtype.Node{Name: "n1", DSN: standby.DSN(db, pgcluster.Superuser)}); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{MaintenanceInterval: 50 * time.Millisecond})
	return e, standby, id
}

// A worker dies right after its task's transaction committed on the node, and the attempt is
// rescued only once the node no longer keeps the commit status of so old a transaction id
// (pg_xact_status answers NULL): here pg_resetwal moves the node's oldest kept status past
// it, as a vacuum truncating the commit log does long after. That answer says nothing of
// whether it committed: the task fails, its effect unknown, rather than run again.
func TestRescueOfATransactionTheNodeNoLongerKnowsLeavesTheEffectUnknown(t *testing.T) {
	e := testenv.New(t)
	const db = "shop"
	node := nodeOfItsOwn(t, e, db)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 3}}})
	diesAfterNodeCommit(t, e, id)

	var (
		xid      string
		timeline *int64
		system   *int64
	)
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT attempt_xid::text, xid_timeline, xid_system FROM deckhand.task WHERE job_id = $1`,
		id).Scan(&xid, &timeline, &system); err != nil {
		t.Fatal(err)
	}
	if timeline == nil || *timeline != 1 || system == nil {
		t.Fatalf("recorded transaction %s with timeline %v and system %v; want timeline 1 and a system identifier", xid, timeline, system)
	}
	conn := pgtest.Connect(t, node.DSN(db, pgcluster.Superuser))
	var next string
	if err := conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	x, err1 := strconv.ParseUint(xid, 10, 32)
	nx, err2 := strconv.ParseUint(next, 10, 32)
	if err1 != nil || err2 != nil || nx <= x {
		t.Fatalf("transaction %s, next %s", xid, next)
	}
	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := node.ResetWAL(ctx, "-u", strconv.FormatUint(x+1, 10), "-x", strconv.FormatUint(nx+10, 10)); err != nil {
		t.Fatal(err)
	}
	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn = pgtest.Connect(t, node.DSN(db, pgcluster.Superuser))
	var status *string
	if err := conn.QueryRow(ctx, `SELECT pg_xact_status($1::xid8)`, xid).Scan(&status); err != nil || status != nil {
		t.Fatalf("the node's status of transaction %s: %v, %v; want none", xid, status, err)
	}
	conn.Close(ctx)
	e.Worker(engine.Config{MaintenanceInterval: 50 * time.Millisecond})
	effectUnknown(t, e, id, node, db, "no longer keeps")
}

// The node commits a task's transaction and the answer is lost with the connection; before
// the node answers the worker's questions, its primary (which the standby had replayed the
// commit from) goes down, the standby is promoted, and the node's conninfo reaches it (an
// address that follows the group's primary). The promoted server, on a timeline of its own,
// cannot tell the attempt's transaction from another it may have given the same id: the task
// fails, its effect unknown because the node failed over, and does not run again on its own.
func TestCommitLostThenFailedOverLeavesTheEffectUnknown(t *testing.T) {
	primary := pgtest.New(t, pgcluster.Options{})
	e := testenv.NewProxied(t, primary)
	db := nodeWithHits(e)
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	id := submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	answer := xactStatusUnanswered(e)
	e.Worker(engine.Config{Backoff: quickAsking})
	loseCommitAnswer(t, e, db, letGo)
	waitAsked(t, e, 2)

	failOver(t, primary, standby)
	e.Proxy.Retarget(standby.Addr())
	answer()
	effectUnknown(t, e.Env, id, standby, db, "failed over")
}
