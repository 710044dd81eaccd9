package drop_test

import (
	"context"
	"fmt"
	"strconv"
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
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// newEnv is a catalog with node n1 on the shared cluster, reached through the fault proxy, and
// a worker that runs drops.
func newEnv(t *testing.T) (e *testenv.Proxied, db string) {
	t.Helper()
	e = testenv.NewProxied(t, pgtest.Shared(t), drop.Feature())
	return e, e.Node("n1")
}

// `deckhand drop` of a table a long SELECT uses: the job waits without making readers of the
// table or writers elsewhere queue longer than the lock timeout, and drops the table promptly
// once the SELECT ends.
func TestDropWaitsForQueries(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE victim AS SELECT g AS id FROM generate_series(1, 1000) g; CREATE TABLE sink (v int)`)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	var id int64
	tr := testenv.WithTraffic(t, e.NodeCluster, db, "victim", "sink", 3*time.Second, func() {
		out := clitest.Run(t, e.DSN, "drop", "--node", "n1", "public.victim")
		var err error
		if id, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
			t.Fatalf("deckhand drop printed %q, want the job id", out)
		}
	})
	tr.Check(t, cleanup.DefaultLockTimeout)
	job := e.Wait(id, 30*time.Second)
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("drop job %s", job.State)
	}
	if d, _ := e.Client.Job(ctx, id); d.Tasks[0].Attempts != 1 {
		t.Errorf("the drop took %d attempts: waiting for a query must not cost attempts", d.Tasks[0].Attempts)
	}
}

// `deckhand drop` of a table the submitter may not drop fails at once — one attempt, no
// waiting — with PostgreSQL's reason, and drops nothing.
func TestDropWithoutPrivilegeFailsAtOnce(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE precious (id int); CREATE TABLE mine (id int)`)
	role := e.Role("dropper")
	quoted := pgx.Identifier{role}.Sanitize()
	// The role may use the catalog (it submits as itself) and owns one table on the node.
	e.Exec("postgres", `GRANT deckhand_submitter TO `+quoted)
	e.NodeExec(db, `ALTER TABLE mine OWNER TO `+quoted)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	asRole := e.RoleDSN(role)

	began := time.Now()
	code, out, errOut := clitest.Deckhand(t, asRole, "drop", "--node", "n1", "--wait", "public.mine", "public.precious")
	if code != 1 || !strings.Contains(errOut, "must be owner of table precious") || !strings.Contains(errOut, "42501") {
		t.Fatalf("drop without privilege: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the refusal took %s; it should be immediate", took)
	}
	id, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	d, err := e.Client.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.SubmittedBy != role || d.Tasks[0].Attempts != 1 || d.Tasks[0].LastError.SQLState != "42501" {
		t.Errorf("job by %s: %d attempts, last error %v; want one attempt failing with 42501", d.SubmittedBy, d.Tasks[0].Attempts, d.Tasks[0].LastError)
	}
	if !e.TableExists(db, "precious") {
		t.Error("a table the role may not drop was dropped")
	}
	// Its own table goes, as that role.
	if code, out, errOut := clitest.Deckhand(t, asRole, "drop", "--node", "n1", "--wait", "mine"); code != 0 || e.TableExists(db, "mine") {
		t.Errorf("dropping its own table: exit %d %s %s", code, out, errOut)
	}
	// A table that does not exist is refused before anything is dropped.
	if code, _, errOut := clitest.Deckhand(t, asRole, "drop", "--node", "n1", "--wait", "nosuch", "precious"); code != 1 || !strings.Contains(errOut, `table "nosuch" does not exist`) {
		t.Errorf("dropping a missing table: exit %d %s", code, errOut)
	}
}

// A drop job whose submitter was forged in the catalog (see testenv.Env.ForgeSubmitter) is
// refused on the node, where the worker re-checks that the submitter is a member of the
// owner, and drops nothing.
func TestForgedDropIsRefused(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE keep_me (id int)`)
	alice := e.Role("alice")
	id := e.Submit(&spec.Job{Tasks: []spec.Task{{Name: "drop", Kind: drop.KindDrop, Node: "n1", MaxAttempts: 1,
		Payload: testenv.Payload(t, drop.Payload{Tables: []string{"keep_me"}})}}})
	e.ForgeSubmitter(id, alice)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	e.FailedWith(id, fmt.Sprintf("submitter %q is not a member of role %q on node n1", alice, pgcluster.Superuser))
	if !e.TableExists(db, "keep_me") {
		t.Error("the forged drop dropped the table")
	}
}

// DROP TABLE takes a partitioned table's partitions and a table's indexes with it: a drop that
// would take a pinned one is refused like a drop of the pinned resource itself.
func TestDropRefusesToTakeAPinnedPartitionOrIndex(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE events (id int, at date) PARTITION BY RANGE (at);
		CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE notes (id int); CREATE INDEX notes_id ON notes (id)`)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	clitest.Run(t, e.DSN, "cleanup", "pin", "--node", "n1", "--reason", "archived", "public.events_2024")
	clitest.Run(t, e.DSN, "cleanup", "pin", "--node", "n1", "--type", "index", "--reason", "audit", "public.notes_id")
	for table, pinned := range map[string]string{"public.events": "events_2024", "public.notes": "notes_id"} {
		code, _, errOut := clitest.Deckhand(t, e.DSN, "drop", "--node", "n1", "--wait", table)
		if code != 1 || !strings.Contains(errOut, "pinned by pin") || !strings.Contains(errOut, pinned) {
			t.Errorf("drop of %s, which holds the pinned %s: exit %d, %q", table, pinned, code, errOut)
		}
	}
	for _, table := range []string{"events", "events_2024", "notes"} {
		if !e.TableExists(db, table) {
			t.Errorf("%s was dropped", table)
		}
	}
}
