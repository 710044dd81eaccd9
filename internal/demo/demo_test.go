package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// summaryRow is one line of the per-task table.
type summaryRow struct {
	task, node, owner, state, worker, duration string
	attempts                                   int
}

// parseSummary reads the per-task table that follows the TASK header.
func parseSummary(t *testing.T, out string) map[string]summaryRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "TASK ") })
	if start < 0 {
		t.Fatalf("no summary table in the output:\n%s", out)
	}
	rows := map[string]summaryRow{}
	for _, l := range lines[start+1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		if len(f) != 7 {
			t.Fatalf("summary row %q: want 7 columns", l)
		}
		n, err := strconv.Atoi(f[4])
		if err != nil {
			t.Fatalf("summary row %q: attempts: %v", l, err)
		}
		rows[f[0]] = summaryRow{task: f[0], node: f[1], owner: f[2], state: f[3], attempts: n, worker: f[5], duration: f[6]}
	}
	return rows
}

// expectedTasks are the demo's task names for nodes, each with the node it runs on.
func expectedTasks(nodes ...string) map[string]string {
	m := map[string]string{"report": nodes[0]}
	for _, n := range nodes {
		for _, step := range []string{"tables", "customers", "orders", "index", "analyze"} {
			m[n+"/"+step] = n
		}
	}
	return m
}

// timeline returns, per task, the output line numbers where it started running and was done.
func timeline(out string) (started, done map[string]int) {
	started, done = map[string]int{}, map[string]int{}
	re := regexp.MustCompile(`^\s+\S+\s+(\S+)\s+(running on|done in) `)
	for i, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			if m[2] == "running on" {
				if _, ok := started[m[1]]; !ok {
					started[m[1]] = i
				}
			} else {
				done[m[1]] = i
			}
		}
	}
	return started, done
}

func TestDemoOnThrowawayCluster(t *testing.T) {
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	err := Run(ctx, Options{}, &out)
	text := out.String()
	t.Logf("demo took %s; output:\n%s", time.Since(begin), text)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	if !regexp.MustCompile(`(?m)^job \d+ finished: 11/11 tasks done in `).MatchString(text) {
		t.Errorf("no final line saying the job finished with 11/11 tasks done")
	}
	rows := parseSummary(t, text)
	want := expectedTasks("eu", "us")
	if len(rows) != len(want) {
		t.Errorf("summary has %d tasks, want %d", len(rows), len(want))
	}
	for name, node := range want {
		r, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("task %s missing from the summary", name)
		case r.state != string(deckhandtype.TaskDone) || r.node != node || r.owner != DefaultOwner || r.attempts != 1:
			t.Errorf("task %s: got %+v, want done on %s as %s after 1 attempt", name, r, node, DefaultOwner)
		case r.worker != "demo-1" && r.worker != "demo-2":
			t.Errorf("task %s ran on %q, want one of the demo's workers", name, r.worker)
		}
	}

	// The timeline proves the DAG's order: nothing started before its prerequisites were done.
	started, done := timeline(text)
	deps := map[string][]string{"report": {"eu/analyze", "us/analyze"}}
	for _, n := range []string{"eu", "us"} {
		deps[n+"/customers"] = []string{n + "/tables"}
		deps[n+"/orders"] = []string{n + "/tables"}
		deps[n+"/index"] = []string{n + "/orders"}
		deps[n+"/analyze"] = []string{n + "/index", n + "/customers"}
	}
	for name := range want {
		if _, ok := started[name]; !ok {
			t.Errorf("the progress log never shows %s running", name)
		}
		if _, ok := done[name]; !ok {
			t.Errorf("the progress log never shows %s done", name)
		}
		for _, d := range deps[name] {
			if done[d] > started[name] {
				t.Errorf("the progress log shows %s running (line %d) before %s was done (line %d)", name, started[name], d, done[d])
			}
		}
	}

	verified := regexp.MustCompile(`(?m)^verified: eu 200,000 orders \+ 20,000 customers, us 200,000 orders \+ 20,000 customers; ` +
		`indexes valid, analyzed, owned by app; report on eu: 10 rows, top customer \d+ with [0-9.]+$`)
	if !verified.MatchString(text) {
		t.Errorf("no verification line with the row counts read back from both nodes")
	}
	if !strings.Contains(text, "nothing left running") {
		t.Errorf("no closing line")
	}
	assertClusterGone(t, text)
}

// assertClusterGone checks that the cluster the output names no longer runs or has files.
func assertClusterGone(t *testing.T, text string) {
	t.Helper()
	m := regexp.MustCompile(`PostgreSQL \S+ on (127\.0\.0\.1:\d+), started in \S+\n\s+a throwaway cluster in (\S+), removed on exit`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the output does not say where the cluster ran")
	}
	if _, err := os.Stat(m[2]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still exists (stat: %v)", m[2], err)
	}
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s", m[1])
	}
	if !strings.Contains(text, "stopped PostgreSQL on "+m[1]+" and removed "+m[2]) {
		t.Errorf("the output does not report stopping the cluster")
	}
}

// catalogEnv is a catalog with registered nodes on a cluster of the test's own, the setup a
// user of `deckhand demo --catalog` has.
type catalogEnv struct {
	cluster *pgcluster.Cluster
	dsn     string
	client  *engine.Client
	nodeDBs map[string]string
}

func newCatalogEnv(t *testing.T, owner string, ownsDBs bool, nodes ...string) *catalogEnv {
	t.Helper()
	ctx := context.Background()
	cl := pgtest.New(t, pgcluster.Options{})
	if err := cl.CreateRole(ctx, owner, "LOGIN"); err != nil {
		t.Fatal(err)
	}
	if err := cl.CreateDatabase(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	// URL conninfo, for the catalog and the nodes: the demo takes either form.
	e := &catalogEnv{cluster: cl, dsn: cl.URL("cat", pgcluster.Superuser), nodeDBs: map[string]string{}}
	cat, err := catalog.Open(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cat.Migrate(ctx)
	cat.Close()
	if err != nil {
		t.Fatal(err)
	}
	if e.client, err = engine.Open(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.Close)
	for i, n := range nodes {
		db := fmt.Sprintf("target_%d", i+1)
		sql := "CREATE DATABASE " + db
		if ownsDBs {
			sql += " OWNER " + pgx.Identifier{owner}.Sanitize()
		}
		if err := cl.Exec(ctx, "postgres", sql); err != nil {
			t.Fatal(err)
		}
		if err := e.client.AddNode(ctx, deckhandtype.Node{Name: n, DSN: cl.URL(db, pgcluster.Superuser), MaxTasks: 2}); err != nil {
			t.Fatal(err)
		}
		e.nodeDBs[n] = db
	}
	return e
}

func (e *catalogEnv) lastJob(t *testing.T) *engine.JobDetail {
	t.Helper()
	jobs, err := e.client.Jobs(context.Background(), deckhandtype.JobFilter{Limit: 1})
	if err != nil || len(jobs) == 0 {
		t.Fatalf("no job in the catalog (err %v)", err)
	}
	d, err := e.client.Job(context.Background(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDemoWithConfiguredCatalog(t *testing.T) {
	e := newCatalogEnv(t, "shopper", true, "alpha", "beta")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := Options{CatalogDSN: e.dsn, Nodes: []string{"beta", "alpha"}, Owner: "shopper", Rows: 5000}
	// Twice: a second run replaces the first one's tables instead of adding to them.
	for run := 1; run <= 2; run++ {
		var out testenv.Buffer
		if err := Run(ctx, opts, &out); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out.String())
		}
		text := out.String()
		t.Logf("run %d output:\n%s", run, text)
		if strings.Contains(text, "throwaway") {
			t.Errorf("run %d started a cluster although a catalog is configured:\n%s", run, text)
		}
		if !strings.Contains(text, "verified: beta 5,000 orders + 500 customers, alpha 5,000 orders + 500 customers; indexes valid, analyzed, owned by shopper; report on beta: 10 rows") {
			t.Errorf("run %d: no verification line for both nodes:\n%s", run, text)
		}
	}

	// The catalog's own record of the last job.
	d := e.lastJob(t)
	if d.State != deckhandtype.JobFinished || d.TasksDone != 11 || d.TasksTotal != 11 {
		t.Errorf("job %d: %s with %d/%d tasks done, want finished 11/11", d.ID, d.State, d.TasksDone, d.TasksTotal)
	}
	want := expectedTasks("beta", "alpha")
	for _, task := range d.Tasks {
		if task.State != deckhandtype.TaskDone || task.Owner != "shopper" || task.Node == nil || *task.Node != want[task.Name] {
			t.Errorf("task %s: %s as %s on %v, want done as shopper on %s", task.Name, task.State, task.Owner, task.Node, want[task.Name])
		}
	}
	workers, err := e.client.Workers(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if w.StoppedAt == nil {
			t.Errorf("worker %d (%s) was not stopped", w.ID, w.Name)
		}
	}

	// The result, read independently on each node.
	for node, db := range e.nodeDBs {
		conn := pgtest.Connect(t, e.cluster.DSN(db, pgcluster.Superuser))
		var orders, customers, report int64
		var owner string
		var valid, hasReport bool
		err := conn.QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM deckhand_demo.orders), (SELECT count(*) FROM deckhand_demo.customers),
				pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = 'deckhand_demo.orders'::regclass)),
				(SELECT indisvalid FROM pg_index WHERE indexrelid = 'deckhand_demo.orders_customer_id_idx'::regclass),
				to_regclass('deckhand_demo.top_customers') IS NOT NULL`).
			Scan(&orders, &customers, &owner, &valid, &hasReport)
		if err == nil && hasReport {
			err = conn.QueryRow(context.Background(), `SELECT count(*) FROM deckhand_demo.top_customers`).Scan(&report)
		}
		if err != nil {
			t.Fatalf("node %s: %v", node, err)
		}
		wantReport := int64(0)
		if node == "beta" {
			wantReport = 10
		}
		if orders != 5000 || customers != 500 || owner != "shopper" || !valid || report != wantReport {
			t.Errorf("node %s: %d orders, %d customers, %d report rows, owner %s, index valid %v; want 5000, 500, %d, shopper, true",
				node, orders, customers, report, owner, valid, wantReport)
		}
	}
}

func TestDemoFailedJobIsReported(t *testing.T) {
	// The owner may log in but not create anything in the node databases.
	e := newCatalogEnv(t, "visitor", false, "eu", "us")
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := Run(ctx, Options{CatalogDSN: e.dsn, Owner: "visitor", Rows: 1000}, &out)
	text := out.String()
	if !errors.Is(err, ErrJobFailed) {
		t.Fatalf("Run: got %v, want ErrJobFailed\n%s", err, text)
	}
	rows := parseSummary(t, text)
	for name := range expectedTasks("eu", "us") {
		want := deckhandtype.TaskUnscheduled
		if strings.HasSuffix(name, "/tables") {
			want = deckhandtype.TaskFailed
		}
		if rows[name].state != string(want) {
			t.Errorf("task %s: summary says %q, want %s", name, rows[name].state, want)
		}
	}
	if !regexp.MustCompile(`(?m)^job \d+ failed: 0/11 tasks done, 2 failed, 9 unscheduled in `).MatchString(text) {
		t.Errorf("no final line saying the job failed:\n%s", text)
	}
	if !strings.Contains(text, "eu/tables attempt 1 failed: 42501 permission denied") {
		t.Errorf("the permission error is not shown:\n%s", text)
	}
	if strings.Contains(text, "verified:") {
		t.Errorf("a failed job was verified:\n%s", text)
	}
	if d := e.lastJob(t); d.State != deckhandtype.JobFailed {
		t.Errorf("catalog says job %d is %s, want failed", d.ID, d.State)
	}
}

func TestDemoNeedsRegisteredNodes(t *testing.T) {
	e := newCatalogEnv(t, "app", true, "eu")
	var out testenv.Buffer
	err := Run(context.Background(), Options{CatalogDSN: e.dsn}, &out)
	if !errors.Is(err, catalog.ErrNotFound) || !strings.Contains(err.Error(), "node us") {
		t.Fatalf("Run without node us registered: got %v, want a not-found error naming us", err)
	}
	if jobs, _ := e.client.Jobs(context.Background(), deckhandtype.JobFilter{}); len(jobs) != 0 {
		t.Errorf("%d jobs submitted, want none", len(jobs))
	}
}

func TestDemoInterruptedCleansUp(t *testing.T) {
	out := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{Rows: 5_000_000}, out) }()
	// Interrupt once the big loads run, as Ctrl-C would.
	deadline := time.Now().Add(time.Minute)
	for !regexp.MustCompile(`eu/orders\s+running on`).MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the orders load never started:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	interrupted := time.Now()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return within a minute of the interrupt:\n%s", out.String())
	}
	text := out.String()
	t.Logf("Run returned %s after the interrupt; output:\n%s", time.Since(interrupted), text)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run: got %v, want ErrInterrupted", err)
	}
	if !regexp.MustCompile(`(?m)^job \d+ cancelling$`).MatchString(text) {
		t.Errorf("the job was not cancelled")
	}
	assertClusterGone(t, text)
}

func TestOptionsAreValidated(t *testing.T) {
	for _, o := range []Options{
		{Nodes: []string{"eu", "eu"}},
		{Nodes: []string{"e u"}},
		{Rows: -1},
		{Workers: 100},
	} {
		err := Run(context.Background(), o, &bytes.Buffer{})
		if !engine.IsInvalid(err) {
			t.Errorf("Run(%+v): got %v, want an invalid-input error", o, err)
		}
	}
}

// fakeTerminal is a Status that records what a terminal would show.
type fakeTerminal struct {
	mu      sync.Mutex
	updates []string
	done    []string
}

func (f *fakeTerminal) Terminal() bool { return true }
func (f *fakeTerminal) Update(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, line)
}
func (f *fakeTerminal) Done(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, line)
}

func TestDemoOnTerminalShowsLiveProgress(t *testing.T) {
	e := newCatalogEnv(t, "app", true, "eu", "us")
	term := &fakeTerminal{}
	var out testenv.Buffer
	bar := func(done, total, _ int) string { return fmt.Sprintf("<%d of %d>", done, total) }
	err := Run(context.Background(), Options{CatalogDSN: e.dsn, Rows: 2000, Status: term, Bar: bar}, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "running on") {
		t.Errorf("on a terminal the state-change log should give way to the live line:\n%s", out.String())
	}
	var sawBar bool
	for _, u := range term.updates {
		if len([]rune(u)) > 78 {
			t.Errorf("status line %q is longer than 78 characters", u)
		}
		sawBar = sawBar || regexp.MustCompile(`^job \d+ \w+ <\d+ of 11> `).MatchString(u)
	}
	if !sawBar {
		t.Errorf("no live progress line with the bar among %q", term.updates)
	}
	if !slices.ContainsFunc(term.done, func(s string) bool {
		return regexp.MustCompile(`^job \d+ finished: 11/11 tasks done in `).MatchString(s)
	}) {
		t.Errorf("no final line among %q", term.done)
	}
}
