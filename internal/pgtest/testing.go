// Package pgtest is the test harness on top of package pgcluster: a cluster shared by a test
// binary with a database per test, clusters and standbys owned by one test, login roles whose
// passwords a pgpass file holds, and a fault-injecting wire-protocol proxy. Main, for TestMain,
// stops every cluster at the end. Only tests import it; the deckhand binary never links it.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// startTimeout bounds starting a cluster from a test; initdb plus startup take a second or two,
// but CI machines under load can be far slower.
const startTimeout = 2 * time.Minute

var (
	mainRunning atomic.Bool
	shared      struct {
		once sync.Once
		c    *pgcluster.Cluster
		err  error
	}
	dbSeq atomic.Int64
)

// Main is for TestMain: it runs the tests, stops every cluster this process started and exits
// with the tests' code (1 if they passed but a cluster failed to stop).
func Main(m *testing.M) {
	mainRunning.Store(true)
	code := m.Run()
	atExit.Lock()
	for _, f := range atExit.funcs {
		f()
	}
	atExit.Unlock()
	if err := pgcluster.StopAll(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stopping clusters:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var atExit struct {
	sync.Mutex
	funcs []func()
}

// AtExit runs f when Main returns, for what outlives single tests (a built binary).
func AtExit(f func()) {
	atExit.Lock()
	defer atExit.Unlock()
	atExit.funcs = append(atExit.funcs, f)
}

// Shared returns the cluster shared by all tests of this binary, starting it on first use. Only
// the superuser logs in without a password there (see CreateLoginRole). It
// outlives the test that started it, so only Main can stop it; tests must not Stop, Kill or
// reconfigure it (use New for that).
func Shared(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatal("pgtest.Shared: call pgtest.Main from TestMain, which stops the shared cluster at exit")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared.c, shared.err = pgcluster.Start(ctx, pgcluster.Options{PasswordAuth: true})
	})
	if shared.err != nil {
		t.Fatalf("pgtest: starting the shared cluster: %v", shared.err)
	}
	return shared.c
}

// NewDatabase creates a database on the shared cluster for this test only and drops it when
// the test ends. The name is derived from the test's name, for reading server logs.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseFrom(t, "template1")
}

// NewDatabaseFrom is NewDatabase with the database a copy of database template of the shared
// cluster, which no session may be connected to.
func NewDatabaseFrom(t testing.TB, template string) string {
	t.Helper()
	c := Shared(t)
	name := databaseName(t.Name(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateDatabaseFrom(ctx, name, template); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The test's own context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return name
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

func databaseName(testName string, seq int64) string {
	base := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	suffix := fmt.Sprintf("_%d", seq)
	// Identifiers are cut at 63 bytes; cutting here keeps the unique suffix.
	if max := 63 - len("t_") - len(suffix); len(base) > max {
		base = base[:max]
	}
	return "t_" + base + suffix
}

// New starts a cluster for this test alone, stopped when the test ends.
func New(t testing.TB, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopInCleanup(t, c) })
	return c
}

// NewStandby starts a hot standby of primary for this test alone, stopped when the test ends.
func NewStandby(t testing.TB, primary *pgcluster.Cluster, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := primary.StartStandby(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopInCleanup(t, s) })
	return s
}

func stopInCleanup(t testing.TB, c *pgcluster.Cluster) {
	if t.Failed() {
		// The directory is about to go; the log is the only clue to what the server saw.
		t.Logf("pgtest: server log of port %d (tail):\n%s", c.Port, c.LogTail(40))
	}
	if err := c.Stop(); err != nil {
		t.Errorf("pgtest: %v", err)
	}
}

// ProxyTo starts a fault-injecting proxy in front of c, closed when the test ends.
func ProxyTo(t testing.TB, c *pgcluster.Cluster) *Proxy {
	t.Helper()
	p, err := NewProxy(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Context is a context cancelled after d or when the test ends, whichever comes first: it
// bounds what a test waits for on a server.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Connect opens a pgx connection closed when the test ends.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connecting to %q: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// FreePort is a TCP port of 127.0.0.1 that nothing listens on now: a host that is down, until
// AcceptSilently makes it one that is up and hung.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// AcceptSilently listens on 127.0.0.1:port until the test ends, accepting connections and
// never answering them: a server whose host is up and hung, or whose route drops packets. The
// test is skipped, saying why, if another process took the port meanwhile.
func AcceptSilently(t testing.TB, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Skipf("port %d was taken meanwhile: %v", port, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
}
