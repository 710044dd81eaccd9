package cleanup_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// `deckhand cleanup run --wait D` waits up to D for resources in use, asking the catalog as
// it goes: a catalog that stops answering meanwhile ends the run, exit 1, with one line,
// instead of holding it for ever (a statement on a silent connection never returns).
func TestCleanupRunGivesUpWhenTheCatalogStopsAnswering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tx := dueRecordOfATableInUse(t, e)
	defer tx.Rollback(ctx) //nolint:errcheck

	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	defer proxy.Stall(false)
	// connect_timeout bounds each round trip to the catalog as well as the connection.
	dsn := proxy.DSN(e.DB, pgcluster.Superuser) + " connect_timeout=2"
	go func() {
		time.Sleep(2 * time.Second) // the run has found the table in use and waits for it
		proxy.Stall(true)
	}()
	began := time.Now()
	code, out, errOut := clitest.Deckhand(t, dsn, "cleanup", "run", "--wait", "5m")
	took := time.Since(began)
	// The error is the one line that starts with "deckhand: ". Other lines are the log, which
	// in-process commands of tests running alongside write to as well (slog's default).
	var lines []string
	for _, l := range strings.Split(errOut, "\n") {
		if strings.HasPrefix(l, "deckhand: ") {
			lines = append(lines, l)
		}
	}
	line := strings.Join(lines, "\n")
	if limit := 20 * time.Second; took > limit || code != 1 || len(lines) != 1 ||
		!strings.Contains(line, "the catalog stopped answering") || !strings.Contains(line, "deckhand cleanup list") {
		t.Errorf("cleanup run --wait 5m with the catalog stalling after 2s took %s: exit %d\nstdout: %s\nstderr: %s\nwant exit 1 within %s and one line saying the catalog stopped answering, naming `deckhand cleanup list`",
			took.Round(time.Millisecond), code, out, errOut, limit)
	}
	proxy.Stall(false)
	// The table is still to be removed, by the next pass.
	if rec := e.Records(id)[0]; rec.State != deckhandtype.CleanupInUse && rec.State != deckhandtype.CleanupDue {
		t.Errorf("the record is %s after the run gave up, want it still due", rec.State)
	}
}
