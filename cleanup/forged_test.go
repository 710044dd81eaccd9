package cleanup_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// The tests here forge the catalog the way only someone who can bypass its protections could
// (the schema's owner disabling the triggers that keep a job's submitter and an operation's
// identity fixed): each executor re-checks on the node that the submitter is a member of the
// owner, refuses, and does nothing.

// forgeSubmitter makes a job look submitted by submitter.
func (e *env) forgeSubmitter(jobID int64, submitter string) {
	e.t.Helper()
	e.Exec(e.DB, `ALTER TABLE deckhand.job DISABLE TRIGGER job_identity`)
	e.Exec(e.DB, `UPDATE deckhand.job SET submitted_by = $1 WHERE id = $2`, submitter, jobID)
	e.Exec(e.DB, `ALTER TABLE deckhand.job ENABLE TRIGGER job_identity`)
}

// forgeOperation makes an operation look begun for submitter (nil: none recorded).
func (e *env) forgeOperation(opID int64, submitter *string) {
	e.t.Helper()
	e.Exec(e.DB, `ALTER TABLE deckhand.operation DISABLE TRIGGER operation_identity`)
	e.Exec(e.DB, `UPDATE deckhand.operation SET submitted_by = $1 WHERE id = $2`, submitter, opID)
	e.Exec(e.DB, `ALTER TABLE deckhand.operation ENABLE TRIGGER operation_identity`)
}

// failedWith waits for the job and checks that it failed with an error containing every fragment.
func (e *env) failedWith(id int64, fragments ...string) {
	e.t.Helper()
	job := e.Wait(id, time.Minute)
	d, err := e.Client.Job(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if job.State != deckhandtype.JobFailed || d.Tasks[0].LastError == nil {
		e.t.Fatalf("job %s, task error %+v: want refused", job.State, d.Tasks[0].LastError)
	}
	for _, f := range fragments {
		if !strings.Contains(d.Tasks[0].LastError.Message, f) {
			e.t.Errorf("task error %q does not mention %q", d.Tasks[0].LastError.Message, f)
		}
	}
}

func TestForgedDropIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, `CREATE TABLE keep_me (id int)`)
	alice := e.Role("alice")
	id := e.submit(&spec.Job{Tasks: []spec.Task{{Name: "drop", Kind: drop.KindDrop, Node: "n1", MaxAttempts: 1,
		Payload: payload(t, drop.Payload{Tables: []string{"keep_me"}})}}})
	e.forgeSubmitter(id, alice)
	e.worker([]engine.Feature{drop.Feature()})
	e.failedWith(id, fmt.Sprintf("submitter %q is not a member of role %q on node n1", alice, pgcluster.Superuser))
	if !e.tableExists(db, "keep_me") {
		t.Error("the forged drop dropped the table")
	}
}

// Both of a move's sessions are checked, each on its own node: here the forged submitter is a
// member of the owner on the source's server but not on the target's, then on neither.
func TestForgedMoveIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, logicalCluster(t))
	src := e.node("src")
	dst := e.AddNode("dst", 8) // on the shared cluster: another server, with roles of its own
	e.exec(src, `CREATE SCHEMA app; CREATE TABLE app.orders (id bigint PRIMARY KEY, note text);
		INSERT INTO app.orders SELECT g, 'x' FROM generate_series(1, 100) g`)
	preSrc := e.snapshot(src, "app.orders")
	// Roles exist per server: the forgers are created on both, and one is made a member of the
	// owner (the superuser, as moves need on PostgreSQL 15) on the source's server only.
	name := func(p string) string { return fmt.Sprintf("%s_%d_%d", p, os.Getpid(), time.Now().UnixNano()%1e9) }
	memberOnSource, outsider := name("forger"), name("outsider")
	for _, c := range []*pgcluster.Cluster{e.cluster, e.Cluster} {
		for _, r := range []string{memberOnSource, outsider} {
			if err := c.CreateRole(ctx, r, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
			})
		}
	}
	e.exec("postgres", `GRANT `+pgx.Identifier{pgcluster.Superuser}.Sanitize()+` TO `+pgx.Identifier{memberOnSource}.Sanitize())

	refusedOn := map[int64]string{}
	for _, tc := range []struct{ submitter, node string }{{memberOnSource, "dst"}, {outsider, "src"}} {
		id := e.submit(&spec.Job{Tasks: []spec.Task{{Name: "move", Kind: move.KindMoveTable, Node: "src", MaxAttempts: 1,
			Payload: payload(t, move.MovePayload{Table: "app.orders", To: "dst"})}}})
		e.forgeSubmitter(id, tc.submitter)
		refusedOn[id] = fmt.Sprintf("submitter %q is not a member of role %q on node %s", tc.submitter, pgcluster.Superuser, tc.node)
	}
	e.worker([]engine.Feature{e.moveKind(false)})
	for id, refusal := range refusedOn {
		e.failedWith(id, refusal)
		if recs := e.records(id); len(recs) != 0 {
			t.Errorf("the refused move registered resources: %+v", recs)
		}
	}
	if d := diff(preSrc, e.snapshot(src, "app.orders")); d != "" {
		t.Errorf("the refused moves changed the source:\n%s", d)
	}
	var schemas int
	if err := e.Pool(dst).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'app'`).Scan(&schemas); err != nil || schemas != 0 {
		t.Errorf("the refused moves created schema app on the target (%d, %v)", schemas, err)
	}
}

// A cleanup record's removal runs as its operation's owner for the operation's submitter: a
// forged submitter is refused on the node, a missing one refused outright; either record ends
// failed with its reason, and the resource stays.
func TestForgedRemovalIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	alice := e.Role("alice")
	r := e.opRunner()
	var jobs []int64
	for _, table := range []string{"forged_submitter", "no_submitter"} {
		jobs = append(jobs, r.start(func(ctx context.Context, op *cleanup.Operation) error {
			if _, err := op.Register(ctx, cleanup.Table("n1", "public", table), cleanup.Always); err != nil {
				return err
			}
			e.exec(db, "CREATE TABLE "+table+" (id int)")
			return op.Succeed(ctx)
		}))
	}
	for _, id := range jobs {
		if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
			t.Fatalf("job %d %s", id, job.State)
		}
	}
	e.forgeOperation(e.records(jobs[0])[0].OperationID, &alice)
	e.forgeOperation(e.records(jobs[1])[0].OperationID, nil)
	e.deckhand("cleanup", "run") // what became of the records is read below

	for i, want := range []string{
		fmt.Sprintf("submitter %q is not a member of role %q on node n1", alice, pgcluster.Superuser),
		"its operation has no recorded submitter",
	} {
		recs := e.records(jobs[i])
		if len(recs) != 1 || recs[0].State != deckhandtype.CleanupFailed || recs[0].LastError == nil || !strings.Contains(*recs[0].LastError, want) {
			t.Errorf("record of job %d: %+v, want failed: %s", jobs[i], recs, want)
		}
	}
	for _, table := range []string{"forged_submitter", "no_submitter"} {
		if !e.tableExists(db, table) {
			t.Errorf("table %s was removed for a refused record", table)
		}
	}
}
