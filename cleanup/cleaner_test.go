package cleanup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/executor"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/spec"
)

// kindOp is a test-only task kind whose body each test writes: it begins an operation for its
// attempt and hands it to the body.
const kindOp = "cleanuptest_op"

func init() { spec.RegisterKind(kindOp, false, func(json.RawMessage) error { return nil }) }

type opBody func(ctx context.Context, op *cleanup.Operation) error

// opRunner is a worker whose cleanuptest_op tasks run bodies registered by key.
type opRunner struct {
	e       *env
	cleaner *cleanup.Cleaner
	mu      sync.Mutex
	bodies  map[string]opBody
}

func (e *env) opRunner(services ...*cleanup.Cleaner) *opRunner {
	r := &opRunner{e: e, cleaner: e.cleaner(), bodies: map[string]opBody{}}
	execs := cleanup.Executors(e.Client.Catalog, pools(e.t))
	execs[kindOp] = executor.Func(func(ctx context.Context, t *catalog.ClaimedTask) error {
		var p struct{ Key string }
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return executor.Permanent(err)
		}
		r.mu.Lock()
		body := r.bodies[p.Key]
		r.mu.Unlock()
		op, err := r.cleaner.Begin(ctx, t, "test operation "+p.Key)
		if err != nil {
			return err
		}
		return body(ctx, op)
	})
	var svcs []engine.Service
	for _, s := range services {
		svcs = append(svcs, s)
	}
	e.worker(execs, svcs...)
	return r
}

// start submits a job whose one task runs body, once.
func (r *opRunner) start(body opBody) int64 {
	r.mu.Lock()
	key := strconv.Itoa(len(r.bodies))
	r.bodies[key] = body
	r.mu.Unlock()
	return r.e.submit(&spec.Job{Tasks: []spec.Task{{Name: "op", Kind: kindOp, MaxAttempts: 1,
		Payload: payload(r.e.t, map[string]string{"key": key})}}})
}

func (e *env) tableExists(db, table string) bool {
	e.t.Helper()
	conn, err := e.cluster.Connect(ctx, db)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		e.t.Fatal(err)
	}
	return ok
}

func (e *env) listJSON(args ...string) []catalog.CleanupRecord {
	e.t.Helper()
	code, out, errOut := e.deckhand(append([]string{"cleanup", "list", "-o", "json"}, args...)...)
	if code != 0 {
		e.t.Fatalf("cleanup list: exit %d: %s", code, errOut)
	}
	var recs []catalog.CleanupRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		e.t.Fatalf("cleanup list -o json: %v\n%s", err, out)
	}
	return recs
}

func (e *env) run(args ...string) string {
	e.t.Helper()
	code, out, errOut := e.deckhand(args...)
	if code != 0 {
		e.t.Fatalf("deckhand %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// While an operation runs, neither `cleanup run` nor the cleaner touches its records or its
// resources, whatever their policy; once its attempt ends without finishing it, it counts as
// failed and the same run removes them. A late registration into it is refused.
func TestLiveOperationIsNeverTouched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	r := e.opRunner()
	registered := make(chan *cleanup.Operation)
	release := make(chan error)
	id := r.start(func(ctx context.Context, op *cleanup.Operation) error {
		for _, tb := range []struct {
			name   string
			policy cleanup.Policy
		}{{"live_a", cleanup.OnFailure}, {"live_b", cleanup.Always}, {"live_c", cleanup.DeferredOnSuccess}} {
			if _, err := op.Register(ctx, cleanup.Table("n1", "public", tb.name), tb.policy); err != nil {
				return err
			}
			e.exec(db, "CREATE TABLE "+tb.name+" (id int)")
		}
		registered <- op
		return <-release
	})
	op := <-registered
	for range 2 {
		out := e.run("cleanup", "run", "--wait", "0")
		if strings.Contains(out, "removed") {
			t.Errorf("cleanup run touched a live operation:\n%s", out)
		}
	}
	if _, err := e.cleaner().RunOnce(ctx, cleanup.RunOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range e.listJSON("--job", strconv.FormatInt(id, 10)) {
		if rec.State != catalog.CleanupPending || rec.Attempts != 0 {
			t.Errorf("record %d of a live operation is %s after %d attempts", rec.ID, rec.State, rec.Attempts)
		}
	}
	for _, tb := range []string{"live_a", "live_b", "live_c"} {
		if !e.tableExists(db, tb) {
			t.Errorf("table %s of a live operation was dropped", tb)
		}
	}

	release <- errors.New("the operation gives up")
	if job := e.Wait(id, 30*time.Second); job.State != catalog.JobFailed {
		t.Fatalf("job %s", job.State)
	}
	if _, err := op.Register(ctx, cleanup.Table("n1", "public", "late"), cleanup.Always); !errors.Is(err, catalog.ErrOperationEnded) {
		t.Errorf("registering into an ended attempt: %v, want ErrOperationEnded", err)
	}
	out := e.run("cleanup", "run")
	if !strings.Contains(out, "the task attempt ended without finishing the operation") {
		t.Errorf("cleanup run should say why it decided the operation:\n%s", out)
	}
	want := map[string]string{"live_a": catalog.CleanupRemoved, "live_b": catalog.CleanupRemoved, "live_c": catalog.CleanupForgotten}
	for _, rec := range e.records(id) {
		if rec.State != want[rec.Name] {
			t.Errorf("record %s is %s, want %s", rec.Name, rec.State, want[rec.Name])
		}
	}
	if e.tableExists(db, "live_a") || e.tableExists(db, "live_b") || !e.tableExists(db, "live_c") {
		t.Errorf("after failure want live_a and live_b dropped, live_c kept")
	}
}

// Records whose node was removed are listed as node_removed, never retried on their own and
// their resources left alone; once the node is back, `cleanup retry` makes them due again.
func TestRecordsOnRemovedNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	e.node("n1")
	db2 := e.node("n2")
	r := e.opRunner()
	id := r.start(func(ctx context.Context, op *cleanup.Operation) error {
		if _, err := op.Register(ctx, cleanup.Table("n2", "public", "scratch"), cleanup.Always); err != nil {
			return err
		}
		e.exec(db2, "CREATE TABLE scratch (id int)")
		return op.Succeed(ctx)
	})
	if job := e.Wait(id, 30*time.Second); job.State != catalog.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	e.run("node", "remove", "n2")
	// The view says so at once, before any cleaner has looked.
	recs := e.listJSON("--state", catalog.CleanupNodeRemoved)
	if len(recs) != 1 || recs[0].Name != "scratch" {
		t.Fatalf("cleanup list --state node_removed = %+v", recs)
	}
	for range 2 {
		e.run("cleanup", "run", "--wait", "0")
	}
	recs = e.listJSON("--job", strconv.FormatInt(id, 10))
	if len(recs) != 1 || recs[0].State != catalog.CleanupNodeRemoved || recs[0].Attempts != 0 ||
		recs[0].LastError == nil || !strings.Contains(*recs[0].LastError, "no longer registered") {
		t.Fatalf("record after runs: %+v", recs)
	}
	code, out, _ := e.deckhand("cleanup", "list")
	if code != 0 || !strings.Contains(out, "node_removed") || !strings.Contains(out, "n2:") {
		t.Errorf("cleanup list does not show the record clearly:\n%s", out)
	}
	if !e.tableExists(db2, "scratch") {
		t.Fatal("the table on the removed node was touched")
	}

	if err := e.Client.AddNode(ctx, catalog.Node{Name: "n2", DSN: e.proxy.DSN(db2, pgtest.Superuser)}); err != nil {
		t.Fatal(err)
	}
	e.run("cleanup", "retry", strconv.FormatInt(recs[0].ID, 10))
	e.run("cleanup", "run")
	if recs := e.records(id); recs[0].State != catalog.CleanupRemoved || e.tableExists(db2, "scratch") {
		t.Errorf("after re-adding the node and retrying: %s, table exists %v", recs[0].State, e.tableExists(db2, "scratch"))
	}
}

// Pinned resources are never dropped: not by the cleaner (the record waits as pinned and goes
// once unpinned) and not by `deckhand drop`; an operation's pin lasts while it runs.
func TestPinnedResourcesAreKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, "CREATE TABLE keep_me (id int); CREATE TABLE held (id int)")
	r := e.opRunner()

	pin := strings.TrimSpace(e.run("cleanup", "pin", "--node", "n1", "--reason", "audit", "public.keep_me"))
	code, _, errOut := e.deckhand("drop", "--node", "n1", "--wait", "public.keep_me")
	if code != 1 || !strings.Contains(errOut, "pinned by pin "+pin+" (audit)") {
		t.Errorf("drop of a pinned table: exit %d, %q", code, errOut)
	}
	id := r.start(func(ctx context.Context, op *cleanup.Operation) error {
		if _, err := op.Register(ctx, cleanup.Table("n1", "public", "keep_me"), cleanup.Always); err != nil {
			return err
		}
		return op.Succeed(ctx)
	})
	e.Wait(id, 30*time.Second)
	e.run("cleanup", "run", "--wait", "0")
	if recs := e.records(id); recs[0].State != catalog.CleanupPinned || !e.tableExists(db, "keep_me") {
		t.Fatalf("pinned record is %s; table exists %v", recs[0].State, e.tableExists(db, "keep_me"))
	}
	e.run("cleanup", "unpin", pin)
	e.run("cleanup", "run")
	if recs := e.records(id); recs[0].State != catalog.CleanupRemoved || e.tableExists(db, "keep_me") {
		t.Errorf("after unpinning: record %s, table exists %v", recs[0].State, e.tableExists(db, "keep_me"))
	}

	// A running operation's pin refuses drops; it lapses when the operation ends.
	pinned := make(chan struct{})
	release := make(chan struct{})
	opJob := r.start(func(ctx context.Context, op *cleanup.Operation) error {
		if _, err := op.Pin(ctx, cleanup.Table("n1", "public", "held"), "reading it"); err != nil {
			return err
		}
		close(pinned)
		<-release
		return op.Succeed(ctx)
	})
	<-pinned
	code, _, errOut = e.deckhand("drop", "--node", "n1", "--wait", "held")
	if code != 1 || !strings.Contains(errOut, "pinned by operation") || !e.tableExists(db, "held") {
		t.Errorf("drop of a table pinned by a running operation: exit %d, %q", code, errOut)
	}
	close(release)
	e.Wait(opJob, 30*time.Second)
	e.run("drop", "--node", "n1", "--wait", "held")
	if e.tableExists(db, "held") {
		t.Error("the pin outlived its operation")
	}
}

// DROP TABLE takes a partitioned table's partitions and a table's indexes with it: a drop that
// would take a pinned one is refused like a drop of the pinned resource itself.
func TestDropRefusesToTakeAPinnedPartitionOrIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, `CREATE TABLE events (id int, at date) PARTITION BY RANGE (at);
		CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE notes (id int); CREATE INDEX notes_id ON notes (id)`)
	e.worker(cleanup.Executors(e.Client.Catalog, pools(t)))
	e.run("cleanup", "pin", "--node", "n1", "--reason", "archived", "public.events_2024")
	e.run("cleanup", "pin", "--node", "n1", "--type", "index", "--reason", "audit", "public.notes_id")
	for table, pinned := range map[string]string{"public.events": "events_2024", "public.notes": "notes_id"} {
		code, _, errOut := e.deckhand("drop", "--node", "n1", "--wait", table)
		if code != 1 || !strings.Contains(errOut, "pinned by pin") || !strings.Contains(errOut, pinned) {
			t.Errorf("drop of %s, which holds the pinned %s: exit %d, %q", table, pinned, code, errOut)
		}
	}
	for _, table := range []string{"events", "events_2024", "notes"} {
		if !e.tableExists(db, table) {
			t.Errorf("%s was dropped", table)
		}
	}
}

// Object-store records: an object and every key under a prefix are deleted; a key that was
// never written counts as removed; nothing else in the bucket is touched.
func TestObjectStoreRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	dir := t.TempDir()
	bucket := "file://" + dir
	files := []string{"exp/part-1.parquet", "exp/sub/part-2.parquet", "expired/other", "keep/x", "single.obj"}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := e.opRunner()
	id := r.start(func(ctx context.Context, op *cleanup.Operation) error {
		for _, reg := range []struct {
			r cleanup.Resource
			p cleanup.Policy
		}{
			{cleanup.Prefix(bucket, "exp/"), cleanup.OnFailure},
			{cleanup.Object(bucket, "single.obj"), cleanup.Always},
			{cleanup.Object(bucket, "never-written"), cleanup.OnFailure},
		} {
			if _, err := op.Register(ctx, reg.r, reg.p); err != nil {
				return err
			}
		}
		if _, err := op.Register(ctx, cleanup.Prefix(bucket, ""), cleanup.OnFailure); err == nil {
			return errors.New("an empty prefix (the whole bucket) was accepted")
		}
		if _, err := op.Register(ctx, cleanup.Prefix("s3://b?secret_access_key=x", "p/"), cleanup.OnFailure); err == nil {
			return errors.New("a bucket URL with a secret was accepted")
		}
		return errors.New("the export failed")
	})
	if job := e.Wait(id, 30*time.Second); job.State != catalog.JobFailed {
		t.Fatalf("job %s", job.State)
	}
	if d, _ := e.Client.Job(ctx, id); d.Tasks[0].LastError.Message != "the export failed" {
		t.Fatalf("task error: %v", d.Tasks[0].LastError)
	}
	e.run("cleanup", "run")
	var left []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			left = append(left, rel)
		}
		return nil
	})
	if fmt.Sprint(left) != "[expired/other keep/x]" {
		t.Errorf("files left: %v, want [expired/other keep/x]", left)
	}
	for _, rec := range e.records(id) {
		if rec.State != catalog.CleanupRemoved {
			t.Errorf("record %s %s is %s", rec.Type, rec.Name, rec.State)
		}
	}
}

// A job-wide operation lives as long as its job and succeeds when the job finishes: its
// on_failure records are then forgotten and its deferred ones removed.
func TestJobWideOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, "CREATE TABLE old_copy (id int); CREATE TABLE new_copy (id int)")
	e.worker(nil)
	c := e.cleaner()
	id := e.submit(&spec.Job{Tasks: []spec.Task{{Name: "wait", Node: "n1", SQL: "SELECT pg_sleep(0.5)"}}})
	op, err := c.BeginJob(ctx, id, "postgres", "rewrite")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.BeginJob(ctx, id, "postgres", "rewrite")
	if err != nil || again.ID() != op.ID() {
		t.Fatalf("second BeginJob: %v, %v (want the same operation)", again, err)
	}
	if _, err := op.Register(ctx, cleanup.Table("n1", "public", "new_copy"), cleanup.OnFailure); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Register(ctx, cleanup.Table("n1", "public", "old_copy"), cleanup.DeferredOnSuccess); err != nil {
		t.Fatal(err)
	}
	// Another operation cannot claim a resource a live one has registered.
	if _, err := op.Register(ctx, cleanup.Table("n1", "public", "old_copy"), cleanup.Always); err == nil {
		t.Error("a resource was registered twice")
	} else if busy := (*catalog.ResourceBusyError)(nil); !errors.As(err, &busy) || !busy.OperationLive {
		t.Errorf("registering twice: %v", err)
	}
	if job := e.Wait(id, 30*time.Second); job.State != catalog.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	e.run("cleanup", "run")
	if !e.tableExists(db, "new_copy") || e.tableExists(db, "old_copy") {
		t.Errorf("after the job finished: new_copy kept %v, old_copy dropped %v", e.tableExists(db, "new_copy"), !e.tableExists(db, "old_copy"))
	}
}
