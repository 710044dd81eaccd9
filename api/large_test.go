package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/deckhandtype"
)

// A catalog of 100,000 jobs and 300,000 tasks: every page of the API and the dashboard's
// counts must stay as fast as on an empty one (index walks, no full scans).
func TestLargeCatalogStaysFast(t *testing.T) {
	if testing.Short() {
		t.Skip("populates 100,000 jobs")
	}
	h := newHarness(t)
	start := time.Now()
	// Counters agree with the task rows; the trigger derives each job's state from them.
	// Every 50th job failed (done, failed, unscheduled), every 77th was cancelled, the newest
	// 200 are running and the 100 before them wait; the rest finished.
	h.Exec(h.DB, `
		INSERT INTO deckhand.job (description, kind, tasks_total, tasks_done, tasks_failed, tasks_cancelled,
			tasks_unscheduled, cancel_requested_at, created_at, started_at)
		SELECT 'nightly maintenance ' || g, 'sql', 3,
			CASE WHEN g > 99700 THEN 0 WHEN g % 50 = 0 THEN 1 WHEN g % 77 = 0 THEN 1 ELSE 3 END,
			CASE WHEN g <= 99700 AND g % 50 = 0 THEN 1 ELSE 0 END,
			CASE WHEN g <= 99700 AND g % 50 <> 0 AND g % 77 = 0 THEN 2 ELSE 0 END,
			CASE WHEN g <= 99700 AND g % 50 = 0 THEN 1 ELSE 0 END,
			CASE WHEN g <= 99700 AND g % 50 <> 0 AND g % 77 = 0 THEN now() END,
			now() - (100000 - g) * interval '1 second',
			CASE WHEN g <= 99700 OR g > 99800 THEN now() - (100000 - g) * interval '1 second' END
		FROM generate_series(1, 100000) g;
		INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
		SELECT j.id, 't' || i, 'noop', 'app', 3, '1h',
			CASE WHEN j.state = 'finished' THEN 'done'
			     WHEN j.state = 'failed' THEN (ARRAY['done', 'failed', 'unscheduled'])[i]
			     WHEN j.state = 'cancelled' THEN (ARRAY['done', 'cancelled', 'cancelled'])[i]
			     WHEN j.state = 'running' THEN (ARRAY['running', 'blocked', 'blocked'])[i]
			     ELSE (ARRAY['runnable', 'blocked', 'blocked'])[i] END
		FROM deckhand.job j, generate_series(1, 3) i`)
	h.Exec(h.DB, `UPDATE deckhand.task SET attempt_token = nextval('deckhand.attempt_token_seq'), runs = 1,
		started_at = now(), worker_id = 1 WHERE state = 'running'`)
	t.Logf("populated 100,000 jobs and 300,000 tasks in %s", time.Since(start).Round(time.Millisecond))
	// As autovacuum would, so that index-only scans need no heap visits.
	h.Exec(h.DB, `VACUUM ANALYZE deckhand.job`)
	h.Exec(h.DB, `VACUUM ANALYZE deckhand.task`)

	var first api.JobList
	h.mustGet("/api/jobs?limit=1", &first)
	top := first.Jobs[0].ID
	for _, c := range []struct{ name, path string }{
		{"first page", "/api/jobs?limit=50"},
		{"deepest page", fmt.Sprintf("/api/jobs?limit=50&before=%d", top-99900)},
		{"running jobs", "/api/jobs?state=running&limit=50"},
		{"scheduled jobs (none in the oldest 99,700)", "/api/jobs?state=scheduled&limit=50&before=" + fmt.Sprint(top-300)},
		{"failed jobs, deep page", fmt.Sprintf("/api/jobs?state=failed&limit=50&before=%d", top-90000)},
		{"one job", fmt.Sprintf("/api/jobs/%d", top-5)},
		{"summary (job and task counts)", "/api/summary"},
		{"metrics", "/metrics"},
		{"nodes", "/api/nodes"},
		{"workers", "/api/workers"},
	} {
		var took []time.Duration
		for range 7 {
			t0 := time.Now()
			r := h.get(c.path)
			took = append(took, time.Since(t0))
			if r.code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", c.path, r.code, r.body)
			}
		}
		slices.Sort(took)
		median := took[len(took)/2]
		t.Logf("%-45s median %7s  min %7s", c.name, median.Round(10*time.Microsecond), took[0].Round(10*time.Microsecond))
		// Generous: the race detector and a loaded CI machine; a full scan would still exceed it
		// for the pages, but not for the counts, which read every job row by design.
		if limit := 250 * time.Millisecond; median > limit {
			t.Errorf("GET %s: median %s, want under %s", c.path, median, limit)
		}
	}
	var took []time.Duration
	var st deckhandtype.Stats
	for range 5 {
		var err error
		if st, err = h.Client.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		took = append(took, st.Took)
	}
	slices.Sort(took)
	t.Logf("deckhandtype.Stats (uncached) median %s: jobs %v tasks %v", took[2].Round(10*time.Microsecond), st.Jobs, st.Tasks)
	var jobs int64
	for _, n := range st.Jobs {
		jobs += n
	}
	if jobs != 100000 || st.Jobs["running"] != 200 || st.Jobs["scheduled"] != 100 {
		t.Errorf("job counts: %v", st.Jobs)
	}
	if st.Tasks["running"] != 200 || st.Tasks["blocked"] != 600 || st.Tasks["runnable"] != 100 {
		t.Errorf("active task counts: %v", st.Tasks)
	}
	// The first page walks the primary key from the newest job; it does not sort them all.
	var plan strings.Builder
	rows, err := h.Client.Catalog().Pool.Query(ctx, `EXPLAIN (COSTS OFF) SELECT * FROM deckhand.jobs
		WHERE id < 9223372036854775807 ORDER BY id DESC LIMIT 51`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if !strings.Contains(plan.String(), "Index Scan Backward using job_pkey on job j") || strings.Contains(plan.String(), "Seq Scan on job j") {
		t.Errorf("the first page of jobs does not walk the primary key backwards:\n%s", plan.String())
	}
}
