package engine_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// The tests of a task whose COMMIT answer is lost share one setup: node n1 behind the proxy
// with an empty table hits, a job whose one task inserts a row into it, and proxy rules that
// hold the answer, lose it, and keep the node from saying what became of the transaction.
// Counting the rows in hits tells how many times the task took effect.

// quickAsking has the worker ask the node again every 100 to 200 ms, so that a test sees it
// ask several times in a few seconds.
var quickAsking = deckhandtype.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond}

// nodeWithHits registers node n1 behind the proxy, with an empty table hits, and returns its
// database.
func nodeWithHits(e *testenv.Proxied) string {
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE hits (n int)`)
	return db
}

// oneHitJob is a job whose one task, a, inserts one row into hits on n1, with attempts to
// spare for a run again.
func oneHitJob() *spec.Job {
	return &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 5}}}
}

// hitCount is how many rows hits has on db, asked of the node cluster directly rather than
// through the proxy: how many times the task took effect.
func hitCount(t *testing.T, e *testenv.Proxied, db string) int {
	t.Helper()
	conn := pgtest.Connect(t, e.NodeCluster.DSN(db, pgcluster.Superuser))
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdCommitAnswers holds the DISCARD ALL that follows a COMMIT in its round trip, so that
// the COMMIT reaches the node and its answer stays in the proxy. Other sessions' resets are
// held too. The returned func lets go.
func holdCommitAnswers(e *testenv.Proxied) (letGo func()) {
	return e.Proxy.AddRule(pgtest.Rule{Name: "hold", Match: regexp.MustCompile(`DISCARD ALL`), Action: pgtest.ActionStall})
}

// xactStatusUnanswered makes the node's pg_xact_status fail as a broken connection does
// (rule "status"), so that the worker cannot learn what became of a commit. The returned
// func lets the node answer again.
func xactStatusUnanswered(e *testenv.Proxied) (answer func()) {
	return e.Proxy.AddRule(pgtest.Rule{Name: "status", Match: regexp.MustCompile(`pg_xact_status`), Action: pgtest.ActionError, Code: "08006"})
}

// loseCommitAnswer waits until the node has committed the task, then breaks every connection
// through the proxy, so that the held answer is lost with it, and lets go of the hold.
func loseCommitAnswer(t *testing.T, e *testenv.Proxied, db string, letGo func()) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() bool { return hitCount(t, e, db) == 1 }, "the node commits the task")
	e.Proxy.DropAll()
	letGo()
}

// waitAsked waits until the worker has asked the node at least n times what became of the
// commit (hits of rule "status").
func waitAsked(t *testing.T, e *testenv.Proxied, n int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() bool { return e.Proxy.Hits("status") >= n }, "the worker asks the node about the commit")
}

// wantFinishedOnce fails the test unless job is finished and its task took effect on db
// exactly once.
func wantFinishedOnce(t *testing.T, e *testenv.Proxied, db string, id int64, job deckhandtype.Job) {
	t.Helper()
	if n := hitCount(t, e, db); n != 1 || job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, the task took effect %d times; want finished, once: %s", job.State, n, explain(detail(t, e.Env, id)))
	}
}

// diesAfterNodeCommit runs a worker built with the fault hook, which commits one task on its
// node and dies before recording it.
func diesAfterNodeCommit(t *testing.T, e *testenv.Env, id int64) {
	t.Helper()
	p := e.ServeBinary(testenv.FaultBinary(t), []string{"DECKHAND_FAULT=kill-after-node-commit"},
		"--lease", "1s", "--concurrency", "1")
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the faulty worker exited with %v, want killed after a commit:\n%s", err, p.Output())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the faulty worker never reached a commit: %s\n%s", explain(detail(t, e, id)), p.Output())
	}
}
