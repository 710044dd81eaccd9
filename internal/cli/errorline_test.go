package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A catalog that refuses connections is tried with TLS and then without, and both attempts
// fail alike: the error line says so once.
func TestRefusedCatalogIsReportedOnce(t *testing.T) {
	code, stdout, stderr := clitest.Deckhand(t, "host=127.0.0.1 port=1 user=nobody dbname=nothing", "job", "list")
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("job list against a refused catalog: exit %d, stdout %q, stderr %q; want 1 and one line", code, stdout, stderr)
	}
	if n := strings.Count(stderr, "connection refused"); n != 1 {
		t.Errorf("the error line says %d times that the connection was refused, want once: %s", n, stderr)
	}
}

// The reason a catalog gives for refusing a connection is the error line, not the TLS attempt
// before it: with sslmode prefer (libpq's default), a server without TLS first refuses TLS,
// which only means that the plain attempt follows.
func TestCatalogRefusalIsNotReportedAsATLSError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn := fmt.Sprintf("host=%s port=%d dbname=no_such_database user=postgres sslmode=prefer", e.Cluster.Host, e.Cluster.Port)
	code, stdout, stderr := clitest.Deckhand(t, dsn, "job", "list")
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("job list against a missing catalog database: exit %d, stdout %q, stderr %q; want 1 and one line", code, stdout, stderr)
	}
	if !strings.Contains(stderr, `database "no_such_database" does not exist`) || strings.Contains(stderr, "TLS") {
		t.Errorf("the error line should give the server's reason and nothing of TLS: %s", stderr)
	}
}

// job wait that times out while the catalog refuses connections says why once.
func TestWaitForARefusedCatalogSaysWhyOnce(t *testing.T) {
	t.Parallel()
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=nobody dbname=nothing", pgtest.FreePort(t))
	code, _, stderr := clitest.Deckhand(t, dsn, "job", "wait", "1", "--timeout", "1s")
	if code != 3 || !strings.Contains(stderr, "timed out") {
		t.Fatalf("job wait --timeout 1s against a refused catalog: exit %d, stderr %q; want 3, timed out", code, stderr)
	}
	if n := strings.Count(stderr, "connection refused"); n != 1 {
		t.Errorf("the error line says %d times that the connection was refused, want once: %s", n, stderr)
	}
}

// A task whose node refuses the connection records the reason once, on one line.
func TestTaskConnectErrorIsRecordedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.runIn(`{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1", "max_attempts": 1}]}`, "job", "submit", "-"))
	// The node moves to where nothing listens after the submission checked it.
	want(t, e.run("node", "add", "n1", "--dsn", fmt.Sprintf("host=127.0.0.1 port=%d dbname=x user=postgres", pgtest.FreePort(t))), 0)
	e.worker()
	want(t, e.run("job", "wait", id, "--timeout", "20s"), 1)
	j := e.show(id)
	if len(j.Attempts) != 1 {
		t.Fatalf("attempts: %+v", j.Attempts)
	}
	msg := j.Attempts[0].Message
	if strings.Count(msg, "connection refused") != 1 || strings.Contains(msg, "\n") {
		t.Errorf("the attempt's error should say once, on one line, that the connection was refused: %q", msg)
	}
}

// A catalog conninfo of two servers with sslmode require, the first of which has no TLS and
// the second of which refuses connections: the first's only failure is its refusal of TLS,
// and the error line dropped it as the mere prelude of a plain attempt (sslmode prefer's),
// so that the line named the second server alone, as if the first had not been tried.
func TestAttackTLSRefusalWithoutAPlainAttemptIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	free := pgtest.FreePort(t)
	dsn := fmt.Sprintf("host=%s,127.0.0.1 port=%d,%d dbname=x user=postgres sslmode=require", e.Cluster.Host, e.Cluster.Port, free)
	code, stdout, stderr := clitest.Deckhand(t, dsn, "job", "list")
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("job list: exit %d, stdout %q, stderr %q; want 1 and one line", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "refused TLS") || !strings.Contains(stderr, "connection refused") {
		t.Errorf("the error line should say that the first server refused TLS and the second the connection: %s", stderr)
	}
}
