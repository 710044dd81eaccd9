package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// TestScreenshots renders the dashboard's main pages against a real catalog with a few
// realistic jobs and saves them as PNG files. It runs only when asked:
//
//	DECKHAND_SCREENSHOTS=docs go test ./api -run Screenshots
//
// writes docs/dashboard-*.png (a relative directory is taken from the repository root).
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("DECKHAND_SCREENSHOTS")
	if dir == "" {
		t.Skip("set DECKHAND_SCREENSHOTS=docs to render the dashboard's screenshots")
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	b := newBrowser(t, 1440, 900)
	h := newHarness(t)
	// A readable name for the role that submits the jobs and is signed in.
	if err := pgtest.CreateLoginRole(ctx, h.Cluster, "alice", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Cluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS alice") })
	h.user = h.setupUser("alice", "deckhand_admin")
	eu1 := h.AddNode("eu-central-1", 4)
	eu2 := h.AddNode("eu-central-2", 4)
	us1 := h.AddNode("us-east-1", 1)
	for _, db := range []string{eu1, eu2, us1} {
		h.Exec(db, `CREATE TABLE customers (id bigint, email text); INSERT INTO customers VALUES (1, 'a@example.com'), (2, 'a@example.com');
			CREATE SEQUENCE flaky; ALTER TABLE customers OWNER TO alice; ALTER SEQUENCE flaky OWNER TO alice;
			GRANT CREATE ON SCHEMA public TO alice`)
	}
	for _, name := range []string{"deckhand-5f7c9d-x2lqk", "deckhand-5f7c9d-m8v4t"} {
		h.Worker(engine.Config{Name: name, Concurrency: 16, Logger: quiet,
			Backoff: deckhandtype.Backoff{Base: 700 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}})
	}

	step := func(name, node, sql string, deps ...string) spec.Task {
		return spec.Task{Name: name, Node: node, SQL: sql, DependsOn: deps}
	}
	noTx := func(t spec.Task) spec.Task { f := false; t.Transaction = &f; return t }
	sleep := func(s float64) string { return fmt.Sprintf("SELECT pg_sleep(%g)", s) }
	// Past jobs, backdated once they end so the list reads like a day of work.
	past := []struct {
		ago time.Duration
		job *spec.Job
	}{
		{26 * time.Hour, &spec.Job{Description: "archive orders_2025_q3 partition", Tasks: []spec.Task{
			step("size", "eu-central-1", sleep(0.2)), step("copy", "eu-central-1", sleep(0.6), "size"),
			step("verify", "eu-central-1", sleep(0.2), "copy"), step("detach", "eu-central-1", sleep(0.1), "verify")}}},
		{9 * time.Hour, &spec.Job{Description: "nightly VACUUM ANALYZE", Tasks: []spec.Task{
			noTx(step("eu-central-1", "eu-central-1", "VACUUM ANALYZE customers")), noTx(step("eu-central-2", "eu-central-2", "VACUUM ANALYZE customers")),
			noTx(step("us-east-1", "us-east-1", "VACUUM ANALYZE customers"))}}},
		{5 * time.Hour, &spec.Job{Description: "add unique constraint on customers.email", Tasks: []spec.Task{
			step("dedupe-check", "eu-central-1", sleep(0.2)),
			step("add-constraint", "eu-central-1", "ALTER TABLE customers ADD CONSTRAINT customers_email_key UNIQUE (email)", "dedupe-check"),
			step("validate", "eu-central-1", "SELECT 1", "add-constraint"), step("announce", "eu-central-1", "SELECT 1", "validate")}}},
		{3 * time.Hour, &spec.Job{Description: "refresh materialized views (reporting)", Tasks: []spec.Task{
			step("daily_revenue", "us-east-1", sleep(0.4)), step("cohorts", "us-east-1", sleep(0.3)), step("funnel", "us-east-1", sleep(0.2), "daily_revenue", "cohorts")}}},
		{47 * time.Minute, &spec.Job{Description: "analyze after bulk load", Tasks: []spec.Task{step("analyze", "eu-central-2", "ANALYZE customers")}}},
		{12 * time.Minute, &spec.Job{Description: "reindex orders_pkey CONCURRENTLY", Tasks: []spec.Task{
			step("reindex", "eu-central-2", sleep(0.8))}}},
	}
	var failedID int64
	for _, p := range past {
		id := h.submit(p.job)
		if j := h.Wait(id, 30*time.Second); j.State == deckhandtype.JobFailed {
			failedID = id
		}
		backdate(t, h, id, p.ago)
	}
	// A real export of a partition: its parts are tasks of its job, its files are cleanup records.
	h.Exec(eu1, `CREATE TABLE orders (id bigint, created_at timestamptz, customer bigint, amount numeric(12,2), note text)
			PARTITION BY RANGE (created_at);
		CREATE TABLE orders_2025_q3 PARTITION OF orders FOR VALUES FROM ('2025-07-01') TO ('2025-10-01');
		INSERT INTO orders SELECT g, '2025-07-01'::timestamptz + g * interval '30 seconds', g % 5000, (g % 997) * 1.25, md5(g::text)
		FROM generate_series(1, 200000) g`)
	exportDir := filepath.Join(os.TempDir(), "deckhand-exports")
	t.Cleanup(func() { os.RemoveAll(exportDir) })
	var exportJob int64
	for i, part := range []string{"orders_2025_q2", "orders_2025_q3"} {
		if i == 0 {
			h.Exec(eu1, `CREATE TABLE orders_2025_q2 PARTITION OF orders FOR VALUES FROM ('2025-04-01') TO ('2025-07-01');
				INSERT INTO orders SELECT g, '2025-04-01'::timestamptz + g * interval '45 seconds', g % 5000, (g % 991) * 1.5, md5(g::text)
				FROM generate_series(1, 150000) g`)
		}
		exp, err := export.Start(ctx, h.Client, export.Request{Table: "orders", Partition: part, Group: "eu-central-1",
			To: "file://" + exportDir + "/" + part, PartSize: 2 << 20, MaxAttempts: 3})
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		h.Wait(exp.JobID, 60*time.Second)
		exportJob = exp.JobID
		backdate(t, h, exp.JobID, 27*time.Hour-time.Duration(i)*time.Hour)
	}
	cancelled := h.submit(&spec.Job{Description: "backfill customer_segments", Tasks: []spec.Task{
		step("backfill", "us-east-1", sleep(60)), step("swap", "us-east-1", "SELECT 1", "backfill")}})
	testenv.Eventually(t, 20*time.Second, func() bool { j, _ := h.Client.JobRow(ctx, cancelled); return j.State == deckhandtype.JobRunning }, "backfill runs")
	time.Sleep(700 * time.Millisecond)
	if _, err := h.Client.Cancel(ctx, cancelled); err != nil {
		t.Fatal(err)
	}
	h.Wait(cancelled, 20*time.Second)
	backdate(t, h, cancelled, 31*time.Minute)

	// The job the screenshots are about: a fan-out over three nodes and a fan-in, running,
	// with one task retrying after serialization failures.
	flaky := `DO $$ BEGIN IF nextval('flaky') <= 2 THEN
		RAISE EXCEPTION 'could not serialize access due to concurrent update' USING ERRCODE = '40001'; END IF; END $$; ` + sleep(1.2)
	main := h.submit(&spec.Job{Description: "rebuild orders indexes across the fleet", Tasks: []spec.Task{
		step("plan", "eu-central-1", sleep(0.6)),
		step("build eu-central-1", "eu-central-1", sleep(1.8), "plan"),
		step("build eu-central-2", "eu-central-2", sleep(2.6), "plan"),
		step("build us-east-1", "us-east-1", flaky, "plan"),
		step("validate eu-central-1", "eu-central-1", sleep(0.5), "build eu-central-1"),
		step("validate eu-central-2", "eu-central-2", sleep(30), "build eu-central-2"),
		step("validate us-east-1", "us-east-1", sleep(30), "build us-east-1"),
		step("swap indexes", "eu-central-1", sleep(1), "validate eu-central-1", "validate eu-central-2", "validate us-east-1"),
		step("analyze", "eu-central-1", "SELECT 1", "swap indexes"),
		step("report", "eu-central-1", "SELECT 1", "analyze"),
	}})
	testenv.Eventually(t, 30*time.Second, func() bool {
		d, err := h.Client.Job(ctx, main)
		if err != nil {
			return false
		}
		state := map[string]deckhandtype.TaskState{}
		for _, t := range d.Tasks {
			state[t.Name] = t.State
		}
		return state["validate eu-central-2"] == deckhandtype.TaskRunning && state["validate us-east-1"] == deckhandtype.TaskRunning
	}, "the main job reaches its validation tasks")
	// us-east-1 runs one task at a time, so this one waits for a free slot.
	queued := h.submit(&spec.Job{Description: "vacuum customers after rebuild", Tasks: []spec.Task{noTx(step("vacuum", "us-east-1", "VACUUM customers"))}})
	time.Sleep(1500 * time.Millisecond)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := func(name, url, ready string, full bool) {
		b.do("open "+url, chromedp.EmulateViewport(1440, 900), chromedp.Navigate(h.http.URL+url))
		b.waitJS(name+" renders", ready, 15*time.Second)
		b.do("settle", chromedp.Sleep(600*time.Millisecond))
		c, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		shoot := chromedp.CaptureScreenshot()
		if full {
			shoot = chromedp.FullScreenshot(100) // 100: PNG, not JPEG
		}
		png, err := chromedp.Run(c, shoot)
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(dir, name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	b.signIn(h.http.URL, h.user)
	setTheme := func(theme string) {
		b.do("theme "+theme, chromedp.Navigate(h.http.URL+"/"), chromedp.Func(func(c context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`localStorage.setItem('deckhand-theme', '`+theme+`')`)(c, tg)
			return err
		}), chromedp.Reload())
	}
	live := `document.querySelector('#live.on') !== null && `
	setTheme("dark")
	shot("dashboard-jobs", "/#/jobs", live+`document.querySelectorAll('table.jobs tbody tr[data-job]').length >= 11`, false)
	shot("dashboard-job", fmt.Sprintf("/#/jobs/%d", main), live+`document.querySelector('svg.gantt') !== null`, true)
	shot("dashboard-job-failed", fmt.Sprintf("/#/jobs/%d", failedID), live+`document.querySelector('.error-item') !== null`, true)
	shot("dashboard-workers", "/#/workers", live+`document.querySelectorAll('tr[data-worker]').length === 2`, false)
	shot("dashboard-exports", "/#/p/exports", live+`document.querySelector('main tbody tr td.id a') !== null`, false)
	shot("dashboard-export-job", fmt.Sprintf("/#/jobs/%d", exportJob), live+`document.querySelector('svg.gantt') !== null`, true)
	shot("dashboard-nodes", "/#/nodes", live+`document.querySelectorAll('tr[data-node]').length === 3`, false)
	setTheme("light")
	shot("dashboard-job-light", fmt.Sprintf("/#/jobs/%d", main), live+`document.querySelector('svg.gantt') !== null`, true)
	b.checkErrors()
	for _, id := range []int64{main, queued} {
		_, _ = h.Client.Cancel(ctx, id)
	}
}

// backdate moves a finished job and its attempts ago into the past.
func backdate(t *testing.T, h *harness, id int64, ago time.Duration) {
	t.Helper()
	iv := fmt.Sprintf("%d seconds", int(ago.Seconds()))
	h.Exec(h.DB, `
		UPDATE deckhand.job SET created_at = created_at - $2::interval, started_at = started_at - $2::interval,
			finished_at = finished_at - $2::interval, cancel_requested_at = cancel_requested_at - $2::interval WHERE id = $1`, id, iv)
	h.Exec(h.DB, `UPDATE deckhand.task SET started_at = started_at - $2::interval, finished_at = finished_at - $2::interval WHERE job_id = $1`, id, iv)
	h.Exec(h.DB, `UPDATE deckhand.task_attempt a SET started_at = a.started_at - $2::interval, finished_at = a.finished_at - $2::interval
		FROM deckhand.task t WHERE t.id = a.task_id AND t.job_id = $1`, id, iv)
}
