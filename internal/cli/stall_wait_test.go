package cli_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// stallLimit is how long a command may take to give up on a catalog that stopped answering
// mid-wait, with connect_timeout=2 (which bounds each round trip): a few bounded tries and
// their backoff, well below the 30 s after which deckhand() cancels a command that hung.
const stallLimit = 20 * time.Second

// stalledDSN is a conninfo reaching the env's catalog through a fault proxy, with each round
// trip bounded by 2 s.
func stalledDSN(t *testing.T, e *env) (*pgtest.Proxy, string) {
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	t.Cleanup(func() { proxy.Stall(false) })
	return proxy, proxy.DSN(e.DB, pgcluster.Superuser) + " connect_timeout=2"
}

// wantGaveUp checks that a wait whose catalog stalled ended within stallLimit, exit 1, with
// one line saying the catalog stopped answering and how to see the job, which may still run.
func wantGaveUp(t *testing.T, r result, took time.Duration, id string) {
	t.Helper()
	t.Logf("gave up after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	line := strings.TrimSpace(r.stderr)
	if took > stallLimit || r.code != cli.ExitFailed || strings.Contains(line, "\n") ||
		!strings.Contains(line, "the catalog stopped answering") || !strings.Contains(line, "deckhand job show "+id) {
		t.Errorf("with the catalog stalled mid-wait, the command took %s: %s; want exit 1 within %s and one line saying the catalog stopped answering, naming `deckhand job show %s`",
			took.Round(time.Millisecond), r, stallLimit, id)
	}
}

// `job wait` without --timeout waits for as long as the job runs, reading the catalog in
// short round trips: a catalog that stops answering meanwhile ends it, exit 1, instead of
// holding it for ever.
func TestJobWaitGivesUpWhenTheCatalogStopsAnswering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1")) // no worker: it waits for ever
	proxy, dsn := stalledDSN(t, e)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		proxy.Stall(true)
	}()
	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "job", "wait", id)
	wantGaveUp(t, r, time.Since(began), id)
}

// `drop --wait` waits for the drop's job: a catalog that stops answering meanwhile ends the
// wait, exit 1, saying that the drop may still run and how to follow it.
func TestDropWaitGivesUpWhenTheCatalogStopsAnswering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	proxy, dsn := stalledDSN(t, e)
	// The catalog stalls once the drop's job is submitted (no worker runs it), as the
	// command waits for it.
	submitted := make(chan int64, 1)
	go func() {
		defer close(submitted)
		ctx := pgtest.Context(t, 30*time.Second)
		var jobs []deckhandtype.Job
		testenv.Eventually(t, 20*time.Second, func() bool {
			jobs, _ = e.Client.Jobs(ctx, deckhandtype.JobFilter{})
			return len(jobs) > 0
		}, "the drop's job is submitted")
		time.Sleep(500 * time.Millisecond)
		proxy.Stall(true)
		submitted <- jobs[0].ID
	}()
	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "drop", "--wait", "--node", "n1", "public.some_table")
	took := time.Since(began)
	id, ok := <-submitted
	if !ok {
		t.Fatalf("the drop's job was never submitted: %s", r)
	}
	if strings.TrimSpace(r.stdout) != strconv.FormatInt(id, 10) {
		t.Errorf("drop --wait printed %q, want the job id %d", r.stdout, id)
	}
	wantGaveUp(t, r, took, strconv.FormatInt(id, 10))
}

// A command that is not waiting for anything, whose catalog stops answering after it
// connected (in the middle of its statements), gives up too, with one line.
func TestShortCommandGivesUpWhenTheCatalogStallsMidStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	proxy, dsn := stalledDSN(t, e)
	// Every statement that reads the job's tasks stalls, on a connection that answered
	// until then.
	proxy.AddRule(pgtest.Rule{Name: "tasks", Match: taskRead, Action: pgtest.ActionStall})
	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "job", "show", id)
	took := time.Since(began)
	if proxy.Hits("tasks") == 0 {
		t.Fatalf("job show read no task: %s", r)
	}
	line := strings.TrimSpace(r.stderr)
	if took > 10*time.Second || r.code != cli.ExitFailed || strings.Contains(line, "\n") || !strings.Contains(line, "the catalog stopped answering") {
		t.Errorf("job show with its statement stalled took %s: %s; want exit 1 within 10s and one line saying the catalog stopped answering",
			took.Round(time.Millisecond), r)
	}
}

// taskRead matches the statement that lists a job's tasks.
var taskRead = regexp.MustCompile(`FROM deckhand\.tasks t\s+WHERE t\.job_id`)

// `job wait` without --timeout started while the catalog takes connections but never
// answers them gives up too, rather than trying new connections for ever.
func TestJobWaitGivesUpOnACatalogSilentFromTheStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	proxy, dsn := stalledDSN(t, e)
	proxy.Stall(true)
	began := time.Now()
	r := deckhand(t, "", "--catalog", dsn, "job", "wait", id)
	wantGaveUp(t, r, time.Since(began), id)
}
