package move_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// moveEnv is a catalog with two node groups, g1 and g2, of one primary each: databases of the
// logical cluster reached by workers through the fault proxy. The move's owner is a role
// that is not a superuser: it has REPLICATION, owns schema app on the source and may create
// schemas in the target's database.
type moveEnv struct {
	*testenv.Proxied
	src, dst string // databases
	owner    string
}

var roleSeq atomic.Int64

func newMoveEnv(t testing.TB) *moveEnv {
	t.Helper()
	e := &moveEnv{Proxied: testenv.NewProxied(t, testenv.LogicalPasswordCluster(t), move.Feature())}
	e.src = testenv.Database(t, e.NodeCluster, "src")
	e.dst = testenv.Database(t, e.NodeCluster, "dst")
	for _, n := range []struct{ name, db, group string }{{"src", e.src, "g1"}, {"dst", e.dst, "g2"}} {
		node := deckhandtype.Node{Name: n.name, DSN: e.Proxy.DSN(n.db, pgcluster.Superuser), Group: n.group, MaxTasks: 4}
		if err := e.Client.AddNode(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	e.owner = fmt.Sprintf("mover_%d_%d", os.Getpid(), roleSeq.Add(1))
	// The owner logs in with a password, which only the worker's pgpass file (PGPASSFILE)
	// holds: the move's sessions and pg_dump must find it there.
	if err := pgtest.CreateLoginRole(ctx, e.NodeCluster, e.owner, "REPLICATION NOSUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, db := range []string{e.src, e.dst} {
			_ = e.NodeCluster.Exec(context.Background(), db, "DROP OWNED BY "+e.ownerIdent())
		}
		_ = e.NodeCluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+e.ownerIdent())
	})
	e.NodeExec(e.dst, "GRANT CREATE ON DATABASE "+pgx.Identifier{e.dst}.Sanitize()+" TO "+e.ownerIdent())
	e.NodeExec(e.src, "GRANT CREATE ON DATABASE "+pgx.Identifier{e.src}.Sanitize()+" TO "+e.ownerIdent())
	return e
}

func (e *moveEnv) ownerIdent() string { return pgx.Identifier{e.owner}.Sanitize() }

// asOwner runs SQL on database db as the owner.
func (e *moveEnv) asOwner(db, sql string) {
	e.T.Helper()
	conn := e.NodeConn(db, e.owner)
	if _, err := conn.Exec(ctx, sql); err != nil {
		e.T.Fatal(err)
	}
	conn.Close(ctx)
}

// worker runs moves with a leader whose cleaner has the test intervals.
func (e *moveEnv) worker(m move.Mover) *engine.Worker {
	if m.Cleaner == nil {
		m.Cleaner = e.Cleaner()
	}
	return e.WorkerWith([]engine.Feature{testenv.Kind(move.Kind, false, m)}, e.Cleaner())
}

// submit submits a move of req as the owner's job.
func (e *moveEnv) submit(req move.Request) int64 {
	e.T.Helper()
	if req.Owner == "" {
		req.Owner = e.owner
	}
	task, err := req.Task("move")
	if err != nil {
		e.T.Fatal(err)
	}
	task.MaxAttempts = 1
	task.Timeout = spec.Duration(2 * time.Minute)
	return e.Submit(jobOf(task))
}

func jobOf(task spec.Task) *spec.Job { return &spec.Job{Description: "move", Tasks: []spec.Task{task}} }

// schemaMoves are tasks of one job (a rebalance's shape): a move of each schema from g1 to
// g2 as the owner, named move-SCHEMA, of at most maxAttempts attempts.
func (e *moveEnv) schemaMoves(maxAttempts int, schemas ...string) []spec.Task {
	e.T.Helper()
	var tasks []spec.Task
	for _, s := range schemas {
		task, err := move.Request{Schema: s, From: "g1", To: "g2", Owner: e.owner}.Task("move-" + s)
		if err != nil {
			e.T.Fatal(err)
		}
		task.MaxAttempts = maxAttempts
		task.Timeout = spec.Duration(2 * time.Minute)
		tasks = append(tasks, task)
	}
	return tasks
}

// checksums returns, per table, an md5 of its rows in primary key order.
func (e *moveEnv) checksums(db string, tables ...string) map[string]string {
	e.T.Helper()
	out := map[string]string{}
	for _, t := range tables {
		var sum string
		err := e.NodePool(db).QueryRow(ctx, `SELECT coalesce(md5(string_agg(r::text, '|' ORDER BY r::text)), 'empty') FROM `+t+` r`).Scan(&sum)
		if err != nil {
			e.T.Fatalf("checksum of %s on %s: %v", t, db, err)
		}
		out[t] = sum
	}
	return out
}

// schemaExists reports whether database db has schema s.
func (e *moveEnv) schemaExists(db, s string) bool {
	e.T.Helper()
	var ok bool
	if err := e.NodePool(db).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s).Scan(&ok); err != nil {
		e.T.Fatal(err)
	}
	return ok
}

// lastError is the job's task's last error message.
func (e *moveEnv) lastError(id int64) string {
	d, err := e.Client.Job(ctx, id)
	if err != nil {
		e.T.Fatal(err)
	}
	if len(d.Tasks) == 0 || d.Tasks[0].LastError == nil {
		return ""
	}
	return d.Tasks[0].LastError.Message
}

// cleanupRun runs `deckhand cleanup run`.
func (e *moveEnv) cleanupRun() string {
	e.T.Helper()
	return clitest.Run(e.T, e.DSN, "cleanup", "run", "--wait", "20s")
}

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
