package nodeconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// What an attempt records with its transaction id (nodeconn.XactSQL, read by an unprivileged
// owner in its own transaction), and what the answers of real servers establish about it: a
// status is trusted only from the primary, on the timeline and with the system identifier,
// that gave out the id; an id the server no longer keeps the status of, or an answer from a
// standby or another timeline, leaves the effect unknown; an id a primary never gave out did
// not commit there, whatever its timeline.
func TestJudgeTrustsOnlyTheHistoryThatGaveOutTheID(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	primary := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	role := "xact_owner_" + strings.ReplaceAll(db, "-", "_")
	if err := pgtest.CreateLoginRole(ctx, primary, role, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = primary.Exec(context.Background(), db, "DROP OWNED BY "+role)
		_ = primary.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+role)
	})
	if err := primary.Exec(ctx, db, "CREATE TABLE t (v int); GRANT INSERT ON t TO "+role); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, primary.DSN(db, role))
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var none *string
	if err := tx.QueryRow(ctx, nodeconn.XactSQL).Scan(&none); err != nil || none != nil {
		t.Fatalf("a transaction that wrote nothing: %v, %v; want NULL", none, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := tx.QueryRow(ctx, nodeconn.XactSQL).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	x, ok := nodeconn.ParseXact(v)
	if !ok || x.Timeline == 0 || x.SystemID == nil {
		t.Fatalf("recorded %q as %+v, %v; want an id, a timeline and a system identifier", v, x, ok)
	}

	pools := nodeconn.NewPools(2)
	defer pools.Close()
	owner := func(c *pgcluster.Cluster) nodeconn.Owner {
		return nodeconn.Owner{Node: "n1", DSN: c.DSN(db, role), Role: role, Submitter: role}
	}
	ask := func(c *pgcluster.Cluster, xid string) nodeconn.XactAnswer {
		t.Helper()
		a, err := nodeconn.XactStatus(ctx, pools, owner(c), xid)
		if err != nil {
			t.Fatalf("ask %s: %v", xid, err)
		}
		return a
	}
	committed := ask(primary, x.XID)
	if got, why := nodeconn.Judge(x, "n1", committed); got != nodeconn.Committed {
		t.Errorf("the primary that gave out the id, on its timeline: %v (%s), answer %+v; want committed", got, why, committed)
	}
	legacy := nodeconn.Xact{XID: x.XID}
	if got, _ := nodeconn.Judge(legacy, "n1", committed); got != nodeconn.Committed {
		t.Errorf("an id recorded without a timeline: %v; want committed, as before timelines were recorded", got)
	}

	// Another timeline: the node failed over between the attempt and the question.
	moved := x
	moved.Timeline++
	if got, why := nodeconn.Judge(moved, "n1", committed); got != nodeconn.Unknown || !strings.Contains(why, "failed over") {
		t.Errorf("an answer from another timeline: %v (%s); want unknown, failed over", got, why)
	}
	// Another system: the node's name reaches another cluster.
	other := x
	sys := *x.SystemID + 1
	other.SystemID = &sys
	if got, why := nodeconn.Judge(other, "n1", committed); got != nodeconn.Unknown || !strings.Contains(why, "another server") {
		t.Errorf("an answer from another system: %v (%s); want unknown, another server", got, why)
	}
	// An id the server never gave out did not commit there, on any timeline; but a server of
	// another system says nothing of the one that ran the attempt.
	future := ask(primary, "4000000000")
	if got, _ := nodeconn.Judge(nodeconn.Xact{XID: "4000000000", Timeline: x.Timeline + 1, SystemID: x.SystemID}, "n1", future); got != nodeconn.NotCommitted {
		t.Errorf("an id the primary never gave out: %v, answer %+v; want not committed", got, future)
	}
	if got, why := nodeconn.Judge(nodeconn.Xact{XID: "4000000000", Timeline: x.Timeline, SystemID: &sys}, "n1", future); got != nodeconn.Unknown || !strings.Contains(why, "another server") {
		t.Errorf("an id another system never gave out: %v (%s), answer %+v; want unknown", got, why, future)
	}
	// A status the server no longer keeps (pg_xact_status answers NULL, here for the invalid
	// id 0, as for an id older than the oldest commit status it keeps): not "did not commit".
	gone := ask(primary, "0")
	if gone.Status != "" {
		t.Fatalf("asked of id 0: %+v; want no status", gone)
	}
	for _, rec := range []nodeconn.Xact{{XID: "0", Timeline: x.Timeline, SystemID: x.SystemID}, {XID: "0"}} {
		if got, why := nodeconn.Judge(rec, "n1", gone); got != nodeconn.Unknown || !strings.Contains(why, "no longer keeps") {
			t.Errorf("no status for %+v: %v (%s); want unknown", rec, got, why)
		}
	}

	// A standby's answer, with the timeline it cannot tell an unprivileged role.
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	onStandby := ask(standby, x.XID)
	if !onStandby.Standby || onStandby.Status != nodeconn.XactCommitted {
		t.Fatalf("the standby's answer: %+v; want committed, from a standby", onStandby)
	}
	if got, why := nodeconn.Judge(x, "n1", onStandby); got != nodeconn.Unknown || !strings.Contains(why, "standby") {
		t.Errorf("a standby's answer: %v (%s); want unknown", got, why)
	}
}

// A task session reads its server's history once, with its first transaction: on a primary,
// the statement after the task's SQL then reads the id alone and the recorded history is the
// session's. A session opened on a standby knows none (the standby may be promoted while the
// session lasts): after the promotion, its transaction reads the new timeline with its id.
func TestTaskSessionRecordsItsServersHistory(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	primary := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	if err := primary.Exec(ctx, db, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	task := &deckhandtype.ClaimedTask{ID: 1, Token: 1, InTransaction: true, TimeoutMS: 10000}
	write := func(c *pgcluster.Cluster) (nodeconn.Xact, string) {
		t.Helper()
		o := nodeconn.Owner{Node: "n1", DSN: c.DSN(db, pgcluster.Superuser), Role: pgcluster.Superuser, Submitter: pgcluster.Superuser}
		conn, release, err := pools.TaskSession(ctx, o, task)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		q := nodeconn.AttemptXactSQL(conn)
		var v string
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		x, ok := nodeconn.ReadAttemptXact(conn, v)
		if !ok {
			t.Fatalf("read %q as no transaction", v)
		}
		return x, q
	}
	first, q1 := write(primary)
	second, q2 := write(primary)
	if q1 != q2 || q2 == nodeconn.XactSQL || first.Timeline != 1 || first.SystemID == nil ||
		second.Timeline != 1 || *second.SystemID != *first.SystemID {
		t.Errorf("on a primary: %+v then %+v, the second by %q; want timeline 1, one system identifier, the id alone read", first, second, q2)
	}

	// A session opened on the standby, kept in its pool of one while the standby is promoted.
	o := nodeconn.Owner{Node: "n1", DSN: standby.DSN(db, pgcluster.Superuser), Role: pgcluster.Superuser, Submitter: pgcluster.Superuser}
	ro := &deckhandtype.ClaimedTask{ID: 2, Token: 1, InTransaction: true, TimeoutMS: 10000}
	conn, release, err := pools.TaskSession(ctx, o, ro)
	if err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	if q := nodeconn.AttemptXactSQL(conn); q != nodeconn.XactSQL {
		t.Errorf("a session on a standby reads %q; want the history read with the id", q)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	release()
	if err := standby.Exec(ctx, "postgres", `SELECT pg_promote()`); err != nil {
		t.Fatal(err)
	}
	promoted, _ := write(standby)
	if promoted.Timeline != 2 || promoted.SystemID == nil || *promoted.SystemID != *first.SystemID {
		t.Errorf("after the promotion: %+v; want timeline 2, the same system identifier", promoted)
	}
	conn, release, err = pools.TaskSession(ctx, o, ro)
	if err != nil {
		t.Fatal(err)
	}
	if conn.PgConn().PID() != pid {
		t.Errorf("the promoted server's write ran in another session than the one opened on the standby")
	}
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck
	release()
}
