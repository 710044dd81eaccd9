package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// A catalog that accepts connections and then never answers (a stopped server, a network
// that drops packets silently) must not hang the command line: a command gives up with one
// line saying the catalog did not answer, and `job wait --timeout` keeps to its timeout.
func TestCommandsGiveUpOnAStalledCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	dsn := proxy.DSN(e.DB, pgcluster.Superuser)
	proxy.Stall(true)
	defer proxy.Stall(false)

	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "job", "show", id)
	took := time.Since(began)
	if took > 15*time.Second || r.code != cli.ExitFailed || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 ||
		!strings.Contains(r.stderr, "catalog") {
		t.Errorf("job show against a stalled catalog took %s: %s; want exit 1 within 15s with one line about the catalog", took.Round(time.Millisecond), r)
	}

	began = time.Now()
	r = deckhand(t, "", "--catalog", dsn, "job", "wait", id, "--timeout", "2s")
	took = time.Since(began)
	if took > 4*time.Second || r.code != cli.ExitTimeout {
		t.Errorf("job wait --timeout 2s against a stalled catalog took %s: %s; want exit 3 within about 2s", took.Round(time.Millisecond), r)
	}
}

// A catalog that stalls while `job wait --timeout` waits (connected, listening) does not
// stretch the wait past its timeout either.
func TestWaitKeepsItsTimeoutWhenTheCatalogStallsMidWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	dsn := proxy.DSN(e.DB, pgcluster.Superuser)
	go func() {
		time.Sleep(2 * time.Second)
		proxy.Stall(true)
	}()
	defer proxy.Stall(false)
	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "job", "wait", id, "--timeout", "5s")
	if took := time.Since(began); took > 9*time.Second || r.code != cli.ExitTimeout {
		t.Errorf("job wait --timeout 5s with the catalog stalling after 2s took %s: %s; want exit 3 within about 5s", took.Round(time.Millisecond), r)
	}
}
