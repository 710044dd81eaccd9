// Package testenv builds what the tests of engine, the features, cleanup, cli and api share on
// top of pgtest: a fresh catalog database (Env), nodes on the shared cluster or behind a
// fault-injecting proxy on a cluster of the test's choosing (Proxied, LogicalCluster), workers
// run in-process or as real deckhand processes, and traffic that a pending drop must not hold
// up (WithTraffic). Package clitest runs the command line in-process.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// Env is one test's catalog, on the shared cluster unless made by NewRestartable.
type Env struct {
	T testing.TB
	// Cluster is the shared cluster: the nodes' databases and the roles are there.
	Cluster *pgcluster.Cluster
	// CatalogCluster holds the catalog database: Cluster, or the test's own (NewRestartable).
	CatalogCluster *pgcluster.Cluster
	DB             string // catalog database
	DSN            string // catalog conninfo (as the superuser)
	Client         *engine.Client
	// Features are the feature packages the env's clients submit to and its workers run.
	Features []engine.Feature

	// pools are the superuser's pools the test used, by cluster and database, closed when it
	// ends: a connection costs the server tens of milliseconds of CPU, and tests poll.
	poolsMu sync.Mutex
	pools   map[poolKey]*pgxpool.Pool
}

type poolKey struct {
	cluster *pgcluster.Cluster
	db      string
}

// New creates a catalog database, migrates it and opens a client on it that knows features.
func New(t testing.TB, features ...engine.Feature) *Env {
	t.Helper()
	return newEnv(t, pgtest.Shared(t), pgtest.NewDatabaseFrom(t, catalogTemplate(t)), features)
}

// catalogTemplateDB is a migrated catalog on the shared cluster, made once per test binary and
// never connected to again: New copies it, which costs a fraction of running every migration
// for each test (the tests of init itself migrate databases of their own).
var catalogTemplateDB struct {
	once sync.Once
	name string
	err  error
}

func catalogTemplate(t testing.TB) string {
	t.Helper()
	catalogTemplateDB.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := pgtest.Shared(t)
		name := fmt.Sprintf("catalog_template_%d", os.Getpid())
		catalogTemplateDB.err = c.CreateDatabase(ctx, name)
		if catalogTemplateDB.err != nil {
			return
		}
		cat, err := catalog.Open(ctx, c.DSN(name, pgcluster.Superuser))
		if err != nil {
			catalogTemplateDB.err = err
			return
		}
		_, catalogTemplateDB.err = cat.Migrate(ctx)
		cat.Close()
		catalogTemplateDB.name = name
	})
	if catalogTemplateDB.err != nil {
		t.Fatalf("testenv: making the catalog template: %v", catalogTemplateDB.err)
	}
	return catalogTemplateDB.name
}

// NewRestartable is New with the catalog in a cluster of the test's own, made with opts
// (e.CatalogCluster), which the test may stop, kill and restart; the nodes stay on the shared
// cluster. Its catalog knows the superuser only: Role and Submitter make roles on the shared
// cluster.
func NewRestartable(t testing.TB, opts pgcluster.Options, features ...engine.Feature) *Env {
	t.Helper()
	c := pgtest.New(t, opts)
	if err := c.CreateDatabase(context.Background(), "catalog"); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, c, "catalog", features)
}

func newEnv(t testing.TB, catalogCluster *pgcluster.Cluster, db string, features []engine.Feature) *Env {
	t.Helper()
	e := &Env{T: t, Cluster: pgtest.Shared(t), CatalogCluster: catalogCluster, DB: db,
		DSN: catalogCluster.DSN(db, pgcluster.Superuser), Features: features}
	// Migrating a copy of the template finds nothing to do; a restartable catalog is migrated
	// here in full.
	cat, err := catalog.Open(context.Background(), e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cat.Close()
	c, err := engine.Open(context.Background(), e.DSN, features...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.Client = c
	return e
}

// AddNode creates a database to serve as a node and registers it. It returns the database name.
func (e *Env) AddNode(name string, maxTasks int) string {
	e.T.Helper()
	db := pgtest.NewDatabase(e.T)
	err := e.Client.AddNode(context.Background(), deckhandtype.Node{Name: name, DSN: e.Cluster.DSN(db, "postgres"), MaxTasks: maxTasks})
	if err != nil {
		e.T.Fatal(err)
	}
	return db
}

// Exec runs SQL as the superuser in database db (the catalog's, or a node's).
func (e *Env) Exec(db, sql string, args ...any) {
	e.T.Helper()
	e.execOn(e.clusterOf(db), db, sql, args...)
}

// execOn runs SQL as the superuser in database db of c, on the test's pool there, and fails
// the test if it fails.
func (e *Env) execOn(c *pgcluster.Cluster, db, sql string, args ...any) {
	e.T.Helper()
	if _, err := e.poolOn(c, db).Exec(context.Background(), sql, args...); err != nil {
		e.T.Fatalf("%s: %v", sql, err)
	}
}

// clusterOf is the cluster that holds database db.
func (e *Env) clusterOf(db string) *pgcluster.Cluster {
	if db == e.DB {
		return e.CatalogCluster
	}
	return e.Cluster
}

// Pool is the test's pool on database db as the superuser (the same one on every call),
// closed at cleanup.
func (e *Env) Pool(db string) *pgxpool.Pool {
	e.T.Helper()
	return e.poolOn(e.clusterOf(db), db)
}

// poolOn is the test's pool of superuser connections to database db of c, opened on first
// use and closed when the test ends; callers must not close it.
func (e *Env) poolOn(c *pgcluster.Cluster, db string) *pgxpool.Pool {
	e.T.Helper()
	e.poolsMu.Lock()
	defer e.poolsMu.Unlock()
	key := poolKey{c, db}
	if p, ok := e.pools[key]; ok {
		return p
	}
	p, err := pgxpool.New(context.Background(), c.DSN(db, pgcluster.Superuser))
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(p.Close)
	if e.pools == nil {
		e.pools = map[poolKey]*pgxpool.Pool{}
	}
	e.pools[key] = p
	return p
}

var roleSeq atomic.Int64

// Role creates a LOGIN role with a unique name and a password that only this process's
// pgpass file holds (see pgtest.CreateLoginRole), dropped at cleanup.
func (e *Env) Role(prefix string) string {
	e.T.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), roleSeq.Add(1))
	if err := pgtest.CreateLoginRole(context.Background(), e.Cluster, name, ""); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		// Objects the role owns live in per-test databases dropped separately; ignore failures.
		_ = e.Cluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
	return name
}

// RoleDSN is the catalog's conninfo for logging in as role (its password comes from pgpass).
func (e *Env) RoleDSN(role string) string { return e.CatalogCluster.DSN(e.DB, role) }

// Submitter creates a role that holds deckhand_submitter and, on the cluster, membership in
// each role of memberOf; it returns the role and a client connected to the catalog as it.
func (e *Env) Submitter(prefix string, memberOf ...string) (string, *engine.Client) {
	e.T.Helper()
	role := e.Role(prefix)
	q := pgx.Identifier{role}.Sanitize()
	e.Exec("postgres", "GRANT deckhand_submitter TO "+q)
	for _, r := range memberOf {
		e.Exec("postgres", "GRANT "+pgx.Identifier{r}.Sanitize()+" TO "+q)
	}
	c, err := engine.Open(context.Background(), e.RoleDSN(role), e.Features...)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(c.Close)
	return role, c
}

// Worker runs an in-process worker until the test ends (or stop is called) and returns it.
func (e *Env) Worker(cfg engine.Config) (w *engine.Worker, stop func()) {
	e.T.Helper()
	cat, err := catalog.Open(context.Background(), e.DSN)
	if err != nil {
		e.T.Fatal(err)
	}
	return e.WorkerOn(cat, cfg)
}

// WorkerOn is Worker on a catalog handle of the test's own (one whose connections it traces,
// say), which stop closes.
func (e *Env) WorkerOn(cat *catalog.Catalog, cfg engine.Config) (w *engine.Worker, stop func()) {
	e.T.Helper()
	if cfg.Features == nil {
		cfg.Features = e.Features
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = 100 * time.Millisecond
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	w = engine.NewWorker(cat, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			e.T.Errorf("worker: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cat.Close()
		})
	}
	e.T.Cleanup(stop)
	// Wait for registration so callers can use w.ID().
	Eventually(e.T, 10*time.Second, func() bool { return w.ID() != 0 }, "worker registers")
	return w, stop
}

// Wait waits for a job to end, failing the test after timeout.
func (e *Env) Wait(id int64, timeout time.Duration) deckhandtype.Job {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	job, err := e.Client.Wait(ctx, id, nil)
	if err != nil {
		d, _ := e.Client.Job(context.Background(), id)
		e.T.Fatalf("wait for job %d: %v (job: %+v)", id, err, d)
	}
	return job
}

// Eventually polls cond until it holds, failing the test after timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// binaries are the deckhand commands built for this test process, by build tags.
var binaries struct {
	sync.Mutex
	paths map[string]string
}

// Binary builds the deckhand command once per test process and returns its path.
func Binary(t testing.TB) string { return build(t, "") }

// FaultBinary builds deckhand with the test-only fault hooks (build tag faultinject, set by
// the environment variable DECKHAND_FAULT): a process that kills itself at a chosen point.
func FaultBinary(t testing.TB) string { return build(t, "faultinject") }

func build(t testing.TB, tags string) string {
	t.Helper()
	binaries.Lock()
	defer binaries.Unlock()
	if p, ok := binaries.paths[tags]; ok {
		return p
	}
	// scripts/test builds both commands once for all the test packages it runs.
	if dir := os.Getenv("DECKHAND_TEST_BIN"); dir != "" {
		name := "deckhand"
		if tags != "" {
			name += "-" + tags
		}
		return filepath.Join(dir, name)
	}
	dir, err := os.MkdirTemp("", "deckhand-bin-")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.AtExit(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "deckhand")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "build", "-tags", tags, "-o", path, "./cmd/deckhand")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if binaries.paths == nil {
		binaries.paths = map[string]string{}
	}
	binaries.paths[tags] = path
	return path
}

// Process is a deckhand command running as its own process.
type Process struct {
	Cmd    *exec.Cmd
	output *Buffer

	waitOnce sync.Once
	exited   chan struct{} // closed once the process has exited, after waiter started
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.output.String() }

// waiter starts waiting for the process, once, and returns the channel closed on its exit.
// Callers that call Cmd.Wait themselves must not use it.
func (p *Process) waiter() <-chan struct{} {
	p.waitOnce.Do(func() {
		p.exited = make(chan struct{})
		go func() { _ = p.Cmd.Wait(); close(p.exited) }()
	})
	return p.exited
}

// Exit waits up to d for the process to exit and returns its exit code (-1 if a signal ended
// it); ok is false if it was still running after d.
func (p *Process) Exit(d time.Duration) (code int, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.waiter():
		return p.Cmd.ProcessState.ExitCode(), true
	case <-t.C:
		return 0, false
	}
}

// Serve starts `deckhand serve` against the env's catalog as a separate process, killed at cleanup.
func (e *Env) Serve(args ...string) *Process {
	e.T.Helper()
	return e.Start(append([]string{"serve", "--log-level", "debug"}, args...)...)
}

// ServeBinary is Serve with another build of deckhand (FaultBinary) and extra environment
// variables ("NAME=value").
func (e *Env) ServeBinary(bin string, env []string, args ...string) *Process {
	e.T.Helper()
	return e.startBinary(bin, env, append([]string{"serve", "--log-level", "debug"}, args...)...)
}

// Start runs `deckhand --catalog DSN args...` against the env's catalog as a separate
// process, killed at cleanup.
func (e *Env) Start(args ...string) *Process {
	e.T.Helper()
	return e.startBinary(Binary(e.T), nil, args...)
}

func (e *Env) startBinary(bin string, env []string, args ...string) *Process {
	e.T.Helper()
	cmd := exec.Command(bin, append([]string{"--catalog", e.DSN}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	buf := &Buffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	p := &Process{Cmd: cmd, output: buf}
	e.T.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.waiter()
		if e.T.Failed() {
			e.T.Logf("deckhand %s output:\n%s", args[0], buf.String())
		}
	})
	return p
}

// Buffer is an io.Writer that a test may read while something else writes to it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
