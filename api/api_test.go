package api_test

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8080", true},
		{"localhost:8080", true},
		{"[::1]:8080", true},
		{"0.0.0.0:8080", true},
		{":8080", true},
		{"8080", false},
		{"db.example.com", false},
	} {
		err := api.CheckListen(c.addr)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q) = %v, want ok=%v", c.addr, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("CheckListen(%q): error is not one line: %q", c.addr, err)
		}
	}
}

// r2s shows an optional id.
func r2s(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func TestJobsArePagedNewestFirst(t *testing.T) {
	h := newHarness(t)
	var ids []int64
	for i := range 23 {
		ids = append(ids, h.submit(noopJob(fmt.Sprintf("job %d", i), 1)))
	}
	for _, id := range ids[:4] {
		if _, err := h.Client.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var seen []int64
	before := ""
	for page := 0; ; page++ {
		var l api.JobList
		h.mustGet("/api/jobs?limit=10"+before, &l)
		if page < 2 && (len(l.Jobs) != 10 || l.NextBefore == nil) {
			t.Fatalf("page %d: %d jobs, next %v; want 10 and a next page", page, len(l.Jobs), l.NextBefore)
		}
		for _, j := range l.Jobs {
			seen = append(seen, j.ID)
		}
		if l.NextBefore == nil {
			break
		}
		before = fmt.Sprintf("&before=%d", *l.NextBefore)
	}
	if len(seen) != len(ids) {
		t.Fatalf("paged through %d jobs, want %d: %v", len(seen), len(ids), seen)
	}
	for i, id := range seen {
		if id != ids[len(ids)-1-i] {
			t.Fatalf("page order %v, want newest first %v", seen, ids)
		}
	}

	var l api.JobList
	h.mustGet("/api/jobs?state=cancelled&limit=3", &l)
	if len(l.Jobs) != 3 || l.Jobs[0].ID != ids[3] || l.NextBefore == nil {
		t.Fatalf("cancelled, first page: %+v", l)
	}
	h.mustGet(fmt.Sprintf("/api/jobs?state=cancelled&limit=3&before=%d", *l.NextBefore), &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] || l.Jobs[0].State != deckhandtype.JobCancelled {
		t.Fatalf("cancelled, second page: %+v", l)
	}
	// A last page that is full says there is no next one, rather than lead to an empty page.
	for _, q := range []string{"state=cancelled&limit=4", fmt.Sprintf("state=cancelled&limit=2&before=%d", ids[2])} {
		h.mustGet("/api/jobs?"+q, &l)
		if len(l.Jobs) == 0 || l.NextBefore != nil {
			t.Errorf("GET /api/jobs?%s: %d jobs, next_before %s, want the last page with next_before null", q, len(l.Jobs), r2s(l.NextBefore))
		}
	}

	for _, q := range []string{"state=done", "limit=0", "limit=501", "limit=x", "before=-1", "before=abc"} {
		r := h.get("/api/jobs?" + q)
		if r.code != http.StatusBadRequest || strings.Count(r.body, "\n") != 1 {
			t.Errorf("GET /api/jobs?%s: %d %q, want 400 with a one-line error", q, r.code, r.body)
		}
	}
}

func TestSubmitValidatesLikeTheCLI(t *testing.T) {
	h := newHarness(t)
	h.AddNode("n1", 2)
	for _, c := range []struct{ body, want string }{
		{`{"tasks": []}`, "no tasks"},
		{`{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1", "depends_on": ["b"]}, {"name": "b", "node": "n1", "sql": "SELECT 1", "depends_on": ["a"]}]}`, "cycle"},
		{`{"tasks": [{"name": "a", "node": "nowhere", "sql": "SELECT 1"}]}`, "unknown node"},
		{`{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1", "retries": 3}]}`, "retries"},
		{`{"tasks": [`, "spec"},
	} {
		r := h.do("POST", "/api/jobs", c.body)
		var e struct{ Error string }
		r.json(t, &e)
		if r.code != http.StatusBadRequest || !strings.Contains(strings.ToLower(e.Error), c.want) || strings.Contains(e.Error, "\n") {
			t.Errorf("POST %s: %d %q, want 400 with a one-line error mentioning %q", c.body, r.code, e.Error, c.want)
		}
	}
	// A page elsewhere may send text/plain with any parameters (no CORS preflight needed), and
	// forms their own types: the media type itself must be JSON or YAML.
	for _, ct := range []string{"text/plain", "text/plain; charset=json", "text/plain;x=yaml", "application/x-www-form-urlencoded; json",
		"multipart/form-data; boundary=json"} {
		if r := h.do("POST", "/api/jobs", `{}`, "Content-Type", ct); r.code != http.StatusUnsupportedMediaType {
			t.Errorf("spec sent as %q: %d, want 415", ct, r.code)
		}
	}
	var jobs api.JobList
	h.mustGet("/api/jobs", &jobs)
	if len(jobs.Jobs) != 0 {
		t.Fatalf("invalid specs wrote jobs: %+v", jobs.Jobs)
	}

	h.worker()
	r := h.do("POST", "/api/jobs", `description: yaml works too
tasks:
  - {name: a, node: n1, sql: SELECT 1}
  - {name: b, node: n1, sql: SELECT 2, depends_on: [a]}
`, "Content-Type", "application/yaml")
	if r.code != http.StatusCreated {
		t.Fatalf("POST valid spec: %d %s", r.code, r.body)
	}
	var created struct{ ID int64 }
	r.json(t, &created)
	if r.header.Get("Location") != fmt.Sprintf("/api/jobs/%d", created.ID) {
		t.Errorf("Location %q", r.header.Get("Location"))
	}
	h.Wait(created.ID, 30*time.Second)
	var d api.JobDetail
	h.mustGet(fmt.Sprintf("/api/jobs/%d", created.ID), &d)
	if d.State != deckhandtype.JobFinished || len(d.Tasks) != 2 || len(d.Attempts) != 2 || d.Tasks[1].DependsOn[0] != "a" {
		t.Fatalf("job detail: %+v", d)
	}
	if r := h.get("/api/jobs/999999"); r.code != http.StatusNotFound {
		t.Errorf("missing job: %d", r.code)
	}
	if r := h.get("/api/jobs/abc"); r.code != http.StatusBadRequest {
		t.Errorf("bad id: %d", r.code)
	}
}

func TestCancelAndRetry(t *testing.T) {
	h := newHarness(t)
	db := h.AddNode("n1", 2)
	h.worker()

	id := h.submit(sqlJob("sleeps", "n1", "SELECT pg_sleep(60)", "SELECT 1"))
	testenv.Eventually(t, 20*time.Second, func() bool {
		j, err := h.Client.JobRow(ctx, id)
		return err == nil && j.State == deckhandtype.JobRunning
	}, "the job runs")
	r := h.do("POST", fmt.Sprintf("/api/jobs/%d/cancel", id), "")
	var sc api.StateChange
	r.json(t, &sc)
	if r.code != http.StatusOK || sc.ID != id || (sc.State != deckhandtype.JobCancelling && sc.State != deckhandtype.JobCancelled) {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	if j := h.Wait(id, 20*time.Second); j.State != deckhandtype.JobCancelled {
		t.Fatalf("after cancel: %s", j.State)
	}
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/cancel", id), ""); r.code != http.StatusConflict || !strings.Contains(r.body, "already cancelled") {
		t.Errorf("cancel a cancelled job: %d %s", r.code, r.body)
	}

	bad := h.submit(sqlJob("fails", "n1", "SELECT * FROM no_such_table"))
	if j := h.Wait(bad, 20*time.Second); j.State != deckhandtype.JobFailed {
		t.Fatalf("job %d: %s, want failed", bad, j.State)
	}
	h.Exec(db, "CREATE TABLE no_such_table (x int); GRANT SELECT ON no_such_table TO PUBLIC")
	r = h.do("POST", fmt.Sprintf("/api/jobs/%d/retry", bad), "")
	if r.code != http.StatusOK {
		t.Fatalf("retry: %d %s", r.code, r.body)
	}
	if j := h.Wait(bad, 20*time.Second); j.State != deckhandtype.JobFinished {
		t.Fatalf("after retry: %s", j.State)
	}
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/retry", bad), ""); r.code != http.StatusConflict || !strings.Contains(r.body, "only failed or cancelled") {
		t.Errorf("retry a finished job: %d %s", r.code, r.body)
	}
	for _, action := range []string{"cancel", "retry"} {
		if r := h.do("POST", "/api/jobs/424242/"+action, ""); r.code != http.StatusNotFound {
			t.Errorf("%s a missing job: %d %s", action, r.code, r.body)
		}
	}
}

func TestPauseAndResume(t *testing.T) {
	h := newHarness(t)
	h.AddNode("n1", 2)
	id := h.submit(sqlJob("waits", "n1", "SELECT 1"))
	var sc api.StateChange
	r := h.do("POST", fmt.Sprintf("/api/jobs/%d/pause?now=true", id), "")
	if r.json(t, &sc); r.code != http.StatusOK || sc.State != deckhandtype.JobPaused {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/pause?now=maybe", id), ""); r.code != http.StatusBadRequest {
		t.Errorf("pause?now=maybe: %d %s", r.code, r.body)
	}
	r = h.do("POST", fmt.Sprintf("/api/jobs/%d/resume", id), "")
	if r.json(t, &sc); r.code != http.StatusOK || sc.State != deckhandtype.JobScheduled {
		t.Fatalf("resume: %d %s", r.code, r.body)
	}
	if r := h.do("POST", fmt.Sprintf("/api/jobs/%d/resume", id), ""); r.code != http.StatusConflict || !strings.Contains(r.body, "only a paused") {
		t.Errorf("resume a job that is not paused: %d %s", r.code, r.body)
	}
	h.worker()
	if j := h.Wait(id, 20*time.Second); j.State != deckhandtype.JobFinished {
		t.Fatalf("after resume: %s", j.State)
	}
	for _, action := range []string{"pause", "resume"} {
		if r := h.do("POST", "/api/jobs/424242/"+action, ""); r.code != http.StatusNotFound {
			t.Errorf("%s a missing job: %d %s", action, r.code, r.body)
		}
	}
}

func TestEventsHintAtChanges(t *testing.T) {
	h := newHarness(t)
	s := h.events()
	s.waitFor(t, 10*time.Second, "hello", func(ev sseEvent) bool { return ev.name == "hello" })
	h.worker()
	id := h.submit(noopJob("streamed", 3))
	h.Wait(id, 20*time.Second)
	s.waitFor(t, 10*time.Second, "a change", func(ev sseEvent) bool { return ev.name == "change" && ev.data == "{}" })
	// Heartbeats keep idle streams (and proxies in between) alive.
	s.waitFor(t, 5*time.Second, "a heartbeat", func(ev sseEvent) bool { return ev.name == "heartbeat" })
}

func TestMetricsHaveCatalogGaugesAndWorkerMetrics(t *testing.T) {
	h := newHarness(t)
	h.worker()
	id := h.submit(noopJob("measured", 3))
	h.Wait(id, 20*time.Second)
	r := h.get("/metrics")
	if r.code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", r.code)
	}
	for _, want := range []string{
		`deckhand_catalog_up 1`,
		`deckhand_jobs{state="finished"}`,
		`deckhand_jobs{state="running"}`,
		`deckhand_tasks{state="done"}`,
		`deckhand_tasks{state="blocked"}`,
		`deckhand_workers_alive 1`,
		`deckhand_task_attempts_total{kind="noop",outcome="done"}`,
		`deckhand_task_duration_seconds_bucket{kind="noop",outcome="done"`,
		`deckhand_claim_duration_seconds_count`,
		`deckhand_tasks_claimed_total`,
		`deckhand_cleanup_backlog{state="due"} 0`,
		`deckhand_export_rows 0`,
		`deckhand_export_bytes 0`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The API's counts, read from job counters and partial indexes, match counting task rows.
func TestSummaryCountsMatchTaskRows(t *testing.T) {
	h := newHarness(t)
	h.AddNode("n1", 1)
	h.worker()
	done := h.submit(noopJob("done", 4))
	h.Wait(done, 20*time.Second)
	failed := h.submit(sqlJob("fails", "n1", "SELECT 1", "SELECT 1/0", "SELECT 1", "SELECT 1"))
	h.Wait(failed, 20*time.Second)
	running := h.submit(sqlJob("runs", "n1", "SELECT pg_sleep(30)", "SELECT 1", "SELECT 2"))
	queued := h.submit(sqlJob("queued", "n1", "SELECT 1", "SELECT 2")) // n1 runs one task at a time
	cancelled := h.submit(sqlJob("cancelled", "n1", "SELECT 1", "SELECT 2"))
	if _, err := h.Client.Cancel(ctx, cancelled); err != nil && !errors.Is(err, catalog.ErrJobTerminal) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		j, err := h.Client.JobRow(ctx, running)
		return err == nil && j.State == deckhandtype.JobRunning
	}, "a task runs")
	_ = queued
	count := func(table string) map[string]int64 {
		out := map[string]int64{}
		rows, _ := h.Client.Catalog().Pool.Query(ctx, `SELECT state, count(*) FROM deckhand.`+table+` GROUP BY state`)
		for rows.Next() {
			var st string
			var n int64
			if err := rows.Scan(&st, &n); err != nil {
				t.Fatal(err)
			}
			out[st] = n
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return out
	}
	// Tasks move between the two reads; compare until they agree.
	var got deckhandtype.Stats
	var tasks, jobs map[string]int64
	deadline := time.Now().Add(15 * time.Second)
	for {
		h.mustGet("/api/summary", &got)
		tasks, jobs = count("task"), count("job")
		agree := true
		for _, st := range deckhandtype.TaskStates {
			agree = agree && got.Tasks[st] == tasks[string(st)]
		}
		for _, st := range deckhandtype.JobStates {
			agree = agree && got.Jobs[st] == jobs[string(st)]
		}
		if agree {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary %v %v never matched the rows: tasks %v, jobs %v", got.Tasks, got.Jobs, tasks, jobs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tasks[string(deckhandtype.TaskBlocked)] == 0 || tasks[string(deckhandtype.TaskRunning)] == 0 || tasks[string(deckhandtype.TaskUnscheduled)] == 0 || tasks[string(deckhandtype.TaskDone)] == 0 {
		t.Errorf("the test should cover blocked, running, unscheduled and done tasks: %v", tasks)
	}
	if got.WorkersAlive != 1 || got.LeaderID == 0 {
		t.Errorf("workers %d, leader %d", got.WorkersAlive, got.LeaderID)
	}
	if _, err := h.Client.Cancel(ctx, running); err != nil {
		t.Fatal(err)
	}
}

func TestHealthzNeedsALeader(t *testing.T) {
	h := newHarness(t)
	r := h.get("/healthz")
	var hz api.Health
	r.json(t, &hz)
	if r.code != http.StatusServiceUnavailable || hz.Status != "no_leader" {
		t.Fatalf("without workers: %d %s", r.code, r.body)
	}
	w := h.worker()
	testenv.Eventually(t, 10*time.Second, func() bool { return h.get("/healthz").code == http.StatusOK }, "healthz is 200")
	h.get("/healthz").json(t, &hz)
	if hz.Status != "ok" || hz.LeaderID == nil || *hz.LeaderID != w.ID() {
		t.Errorf("with a leader: %+v, want leader %d", hz, w.ID())
	}
}

func TestNodesNeverShowPasswords(t *testing.T) {
	h := newHarness(t)
	h.AddNode("plain", 2)
	// Written behind deckhand's back: AddNode refuses conninfo with a password.
	h.Exec(h.DB, `INSERT INTO deckhand.node (name, dsn, node_group, last_error) VALUES
		('kv', 'host=db1 user=app password=hunter2 dbname=x', 'g', 'connect to postgres://app:hunter3@db1/x failed'),
		('url', 'postgresql://app:hunter4@db2:5432/x?sslpassword=hunter5', 'g', NULL)`)
	var res struct{ Nodes []deckhandtype.Node }
	r := h.get("/api/nodes")
	r.json(t, &res)
	if len(res.Nodes) != 3 {
		t.Fatalf("nodes: %s", r.body)
	}
	for _, secret := range []string{"hunter2", "hunter3", "hunter4", "hunter5"} {
		if strings.Contains(r.body, secret) {
			t.Errorf("GET /api/nodes shows %s: %s", secret, r.body)
		}
	}
	if !strings.Contains(r.body, "REDACTED") || !strings.Contains(r.body, "dbname=x") {
		t.Errorf("redaction should keep the rest of the conninfo: %s", r.body)
	}
}

func TestWorkersShowTheLeader(t *testing.T) {
	h := newHarness(t)
	w := h.worker()
	testenv.Eventually(t, 10*time.Second, func() bool { return w.Leading() }, "the worker leads")
	var l api.WorkerList
	h.mustGet("/api/workers", &l)
	if l.LeaderID == nil || *l.LeaderID != w.ID() || len(l.Workers) != 1 || !l.Workers[0].IsLeader || !l.Workers[0].Alive {
		t.Fatalf("workers: %+v", l)
	}
	_, stop := h.Worker(engine.Config{Concurrency: 1, ShutdownGrace: 200 * time.Millisecond, Logger: quiet})
	stop()
	for _, q := range []string{"", "?stopped=0", "?stopped=false"} {
		h.mustGet("/api/workers"+q, &l)
		if len(l.Workers) != 1 {
			t.Errorf("GET /api/workers%s: %d workers, want the live one", q, len(l.Workers))
		}
	}
	for _, q := range []string{"?stopped=1", "?stopped=true"} {
		h.mustGet("/api/workers"+q, &l)
		if len(l.Workers) != 2 {
			t.Errorf("GET /api/workers%s: %d workers, want the stopped one too", q, len(l.Workers))
		}
	}
	if r := h.get("/api/workers?stopped=yes"); r.code != http.StatusBadRequest || !strings.Contains(r.body, "stopped") {
		t.Errorf("GET /api/workers?stopped=yes: %d %s, want 400", r.code, r.body)
	}
}

func TestPagesAreAddedByRegistering(t *testing.T) {
	h := newHarness(t)
	type thing struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	}
	err := h.srv.AddPage(api.Page{Name: "things", Title: "Things",
		Columns: []api.Column{{Key: "name", Title: "Name"}, {Key: "size", Title: "Size", Format: "bytes"}},
		List: func(r *http.Request) (any, error) {
			if r.URL.Query().Get("bad") != "" {
				return nil, &api.BadRequest{Msg: "bad: no"}
			}
			return []thing{{"a", 1 << 20}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	var meta api.Meta
	h.mustGet("/api/meta", &meta)
	if p := meta.Pages[len(meta.Pages)-1]; p.Name != "things" || p.Columns[1].Format != "bytes" {
		t.Fatalf("meta: %+v", meta)
	}
	var items struct{ Items []thing }
	h.mustGet("/api/things", &items)
	if len(items.Items) != 1 || items.Items[0].Size != 1<<20 {
		t.Fatalf("items: %+v", items)
	}
	if r := h.get("/api/things?bad=1"); r.code != http.StatusBadRequest {
		t.Errorf("BadRequest from List: %d", r.code)
	}
	for _, name := range []string{"jobs", "Bad Name", ""} {
		if err := h.srv.AddPage(api.Page{Name: name, List: func(*http.Request) (any, error) { return nil, nil }}); err == nil {
			t.Errorf("AddPage(%q) succeeded", name)
		}
	}
	// A column the dashboard could not show as asked is refused rather than shown as text.
	for i, c := range []api.Column{{Key: "size", Format: "duration"}, {Key: "size", Format: "Bytes"},
		{Key: "done", Format: "progress"}, {Format: "number"}} {
		err := h.srv.AddPage(api.Page{Name: fmt.Sprintf("badcolumn%d", i), Columns: []api.Column{c}, List: func(*http.Request) (any, error) { return nil, nil }})
		if err == nil {
			t.Errorf("AddPage with column %+v succeeded", c)
		}
	}
	if r := h.get("/api/badcolumn0"); r.code != http.StatusNotFound {
		t.Errorf("a refused page is served: %d", r.code)
	}
	for _, f := range []string{"", "text", "state", "job", "time", "duration_ms", "bytes", "bytes_per_s", "number", "error"} {
		err := h.srv.AddPage(api.Page{Name: "format-" + strings.ReplaceAll(cmp.Or(f, "none"), "_", "-"), Columns: []api.Column{{Key: "v", Format: f}},
			List: func(*http.Request) (any, error) { return nil, nil }})
		if err != nil {
			t.Errorf("AddPage with format %q: %v", f, err)
		}
	}
	if r := h.get("/api/nonexistent"); r.code != http.StatusNotFound || !strings.Contains(r.body, "no such endpoint") {
		t.Errorf("unknown endpoint: %d %s", r.code, r.body)
	}
	// An endpoint asked with another method says which it takes.
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/jobs/1/cancel", "POST"},
		{"DELETE", "/api/jobs/1", "GET"},
		{"POST", "/api/things", "GET"},
		{"PUT", "/api/jobs", "GET, POST"},
	} {
		r := h.do(c.method, c.path, "")
		if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != c.allow || !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s %s: %d Allow %q %s, want 405 with Allow %q", c.method, c.path, r.code, r.header.Get("Allow"), r.body, c.allow)
		}
	}
}

func TestDashboardIsServedWithAStrictPolicy(t *testing.T) {
	h := newHarness(t)
	r := h.get("/")
	if r.code != http.StatusOK || !strings.Contains(r.body, `<script type="module" src="/assets/js/main.js">`) {
		t.Fatalf("GET /: %d", r.code)
	}
	csp := r.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	for _, asset := range []string{"js/main.js", "js/views/job.js", "app.css", "favicon.svg"} {
		r := h.get("/assets/" + asset)
		if r.code != http.StatusOK || r.header.Get("ETag") == "" {
			t.Errorf("GET /assets/%s: %d etag %q", asset, r.code, r.header.Get("ETag"))
		}
		if r := h.do("GET", "/assets/"+asset, "", "If-None-Match", r.header.Get("ETag")); r.code != http.StatusNotModified {
			t.Errorf("revalidating %s: %d, want 304", asset, r.code)
		}
	}
}

// The dashboard lists states in the order /api/meta gives and offers Cancel and Retry
// where it says: check that it says what the catalog allows.
func TestMetaDescribesEveryState(t *testing.T) {
	h := newHarness(t)
	var meta api.Meta
	h.mustGet("/api/meta", &meta)
	if !slices.Equal(meta.JobStates, deckhandtype.JobStates) || !slices.Equal(meta.TaskStates, deckhandtype.TaskStates) {
		t.Errorf("job_states %q, task_states %q: want the catalog's, in lifecycle order", meta.JobStates, meta.TaskStates)
	}
	var jobs []string
	for _, s := range meta.States.Jobs {
		jobs = append(jobs, string(s.Name))
		paused := s.Name == deckhandtype.JobPausing || s.Name == deckhandtype.JobPaused
		want := api.JobState{Name: s.Name, Ended: s.Name.Terminal(),
			Cancel: !s.Name.Terminal() && s.Name != deckhandtype.JobCancelling,
			Retry:  s.Name == deckhandtype.JobFailed || s.Name == deckhandtype.JobCancelled,
			Pause:  !s.Name.Terminal() && s.Name != deckhandtype.JobCancelling && !paused,
			Resume: paused}
		if s != want {
			t.Errorf("job state %+v, want %+v", s, want)
		}
	}
	if want := []string{"running", "scheduled", "failing", "pausing", "paused", "cancelling", "finished", "failed", "cancelled"}; !slices.Equal(jobs, want) {
		t.Errorf("job states in the order %q, want %q", jobs, want)
	}
	var tasks []string
	for _, s := range meta.States.Tasks {
		tasks = append(tasks, string(s.Name))
		if s.Ended != s.Name.Terminal() {
			t.Errorf("task state %+v: ended should be %v", s, s.Name.Terminal())
		}
		if n := btoi(s.Pending) + btoi(s.Active) + btoi(s.Ended); n != 1 {
			t.Errorf("task state %+v: want exactly one of pending, active and ended", s)
		}
	}
	if want := []string{"done", "running", "cancelling", "runnable", "paused", "blocked", "failed", "unscheduled", "cancelled"}; !slices.Equal(tasks, want) {
		t.Errorf("task states in the order %q, want %q", tasks, want)
	}
	for _, c := range []struct {
		name deckhandtype.TaskState
		want api.TaskState
	}{
		{deckhandtype.TaskBlocked, api.TaskState{Pending: true}},
		{deckhandtype.TaskRunnable, api.TaskState{Pending: true, Claimable: true}},
		{deckhandtype.TaskPaused, api.TaskState{Pending: true}},
		{deckhandtype.TaskRunning, api.TaskState{Active: true}},
		{deckhandtype.TaskCancelling, api.TaskState{Active: true}},
		{deckhandtype.TaskDone, api.TaskState{Succeeded: true, Ended: true}},
		{deckhandtype.TaskFailed, api.TaskState{Ended: true}},
	} {
		c.want.Name = c.name
		if i := slices.IndexFunc(meta.States.Tasks, func(s api.TaskState) bool { return s.Name == c.name }); i < 0 || meta.States.Tasks[i] != c.want {
			t.Errorf("task state %s: %+v, want %+v", c.name, meta.States.Tasks, c.want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestExportsAndCleanupAreListed(t *testing.T) {
	h := newHarness(t)
	cat := h.Client.Catalog()
	if _, err := cat.AddNode(ctx, deckhandtype.Node{Name: "eu1", DSN: "host=eu1.invalid", Group: "eu", MaxTasks: 1}); err != nil {
		t.Fatal(err)
	}
	exportID, jobID, err := cat.CreateExport(ctx, catalog.NewExport{SourceTable: "orders", Partition: "orders_2024_q1", Group: "eu",
		Primary: "eu1", Owner: "app", Destination: "file:///tmp/deckhand-api-test", Compression: "zstd", PartSize: 64 << 20,
		MaxAttempts: 1, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	opID, err := cat.BeginOperation(ctx, catalog.NewOperation{JobID: jobID, Owner: "app", Description: "export"})
	if err != nil {
		t.Fatal(err)
	}
	recID, err := cat.RegisterCleanup(ctx, opID, deckhandtype.CleanupResource{Type: "prefix", Location: "file:///tmp/deckhand-api-test", Name: "orders_2024_q1/"}, deckhandtype.PolicyOnFailure)
	if err != nil {
		t.Fatal(err)
	}

	var exports struct{ Items []api.ExportItem }
	h.mustGet("/api/exports", &exports)
	if len(exports.Items) != 1 || exports.Items[0].ID != exportID || exports.Items[0].JobID != jobID || exports.Items[0].Partition != "orders_2024_q1" {
		t.Fatalf("exports: %+v", exports)
	}
	var cleanup struct{ Items []deckhandtype.CleanupRecord }
	h.mustGet(fmt.Sprintf("/api/cleanup?job=%d", jobID), &cleanup)
	if len(cleanup.Items) != 1 || cleanup.Items[0].ID != recID || cleanup.Items[0].Policy != deckhandtype.PolicyOnFailure {
		t.Fatalf("cleanup: %+v", cleanup)
	}
	h.mustGet(fmt.Sprintf("/api/cleanup?job=%d&state=pending", jobID), &cleanup)
	if len(cleanup.Items) != 1 || cleanup.Items[0].ID != recID {
		t.Fatalf("cleanup records pending: %+v", cleanup)
	}
	for _, q := range []string{"/api/exports?limit=0", "/api/cleanup?job=x", "/api/cleanup?limit=9999", "/api/cleanup?state=gone"} {
		if r := h.get(q); r.code != http.StatusBadRequest || !strings.Contains(r.body, `"error"`) {
			t.Errorf("GET %s: %d %s, want 400 with an error", q, r.code, r.body)
		}
	}
	var meta api.Meta
	h.mustGet("/api/meta", &meta)
	if len(meta.Pages) != 3 || meta.Pages[0].Name != "exports" || meta.Pages[1].Name != "cleanup" || meta.Pages[2].Name != "schedules" {
		t.Errorf("meta pages: %+v", meta.Pages)
	}
	if _, err := cat.AddSchedule(ctx, catalog.NewSchedule{Name: "nightly", Cron: "0 3 * * *", Timezone: "Europe/Paris",
		Spec: []byte(`{"description": "sweep", "tasks": [{"name": "t", "kind": "noop"}]}`)}); err != nil {
		t.Fatal(err)
	}
	var schedules struct{ Items []deckhandtype.Schedule }
	h.mustGet("/api/schedules", &schedules)
	if len(schedules.Items) != 1 || schedules.Items[0].Name != "nightly" || schedules.Items[0].Timing != "cron 0 3 * * * Europe/Paris" ||
		schedules.Items[0].SpecSummary != "1 task: sweep" {
		t.Errorf("schedules: %+v", schedules)
	}
}
