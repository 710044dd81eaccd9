package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/api"
)

// Who may see a job is decided once per statement, not by a SECURITY DEFINER call per job read
// (about 0.2 ms each: twenty seconds a page for a submitter on a catalog of 100,000 jobs, at
// every dashboard refresh). What each caller sees is unchanged: its own jobs,
// and those whose every owner it is a member of.
func TestSubmitterListsJobsWithoutACallPerJob(t *testing.T) {
	h := newHarness(t)
	mine, other := h.Role("mine"), h.Role("other")
	alice := h.catalogUser("alice", "deckhand_submitter")
	h.Exec("postgres", "GRANT "+pgx.Identifier{mine}.Sanitize()+" TO "+pgx.Identifier{alice.role}.Sanitize())

	// 2,000 jobs of another submitter, run as a role alice is no member of, then one of each
	// kind she may or may not see.
	h.Exec(h.DB, `INSERT INTO deckhand.job (description, kind, tasks_total, tasks_done, owners, created_at, started_at)
		SELECT 'hidden ' || g, 'noop', 1, 1, ARRAY[$1::text], now(), now() FROM generate_series(1, 2000) g`, other)
	for _, j := range []struct {
		desc   string
		owners []string
	}{
		{"owned by mine", []string{mine}},
		{"owned by mine and other", []string{mine, other}},
		{"owned by nobody", []string{}},
		{"owned by a role that does not exist", []string{"no_such_role_anywhere"}},
	} {
		h.Exec(h.DB, `INSERT INTO deckhand.job (description, kind, tasks_total, owners) VALUES ($1, 'noop', 1, $2)`, j.desc, j.owners)
	}
	own, err := alice.client.Submit(ctx, noopJob("alice's own", 1))
	if err != nil {
		t.Fatal(err)
	}
	h.Exec(h.DB, `VACUUM ANALYZE deckhand.job`)

	list := func(as user, path string) api.JobList {
		t.Helper()
		r := h.do("GET", path, "", "Authorization", as.basic())
		if r.code != http.StatusOK {
			t.Fatalf("GET %s as %s: %d %s", path, as.role, r.code, r.body)
		}
		var l api.JobList
		r.json(t, &l)
		return l
	}
	// The plans the submitter's reads get call no function per row: who may see a row is
	// decided by comparisons with what deckhand.member_roles() returned once.
	for _, view := range []string{"jobs", "tasks", "task_attempts", "exports", "rebalance_moves", "schedules",
		"schedule_runs", "job_schedules", "task_progress"} {
		var plan string
		q := "EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM deckhand." + pgx.Identifier{view}.Sanitize()
		rows, err := alice.client.Catalog().Pool.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan += line + "\n"
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if strings.Contains(plan, "may_act_on") {
			t.Errorf("deckhand.%s decides per row who may see it:\n%s", view, plan)
		}
	}
	l := list(alice, "/api/jobs?limit=500")
	var seen []string
	for _, j := range l.Jobs {
		seen = append(seen, j.Description)
	}
	slices.Sort(seen)
	if want := []string{"alice's own", "owned by mine"}; !slices.Equal(seen, want) {
		t.Errorf("alice sees %q, want %q", seen, want)
	}
	if l.Jobs[0].ID != own {
		t.Errorf("alice's newest job is %d, want %d", l.Jobs[0].ID, own)
	}
	// An admin still sees every job.
	all := list(h.user, "/api/jobs?limit=500")
	if len(all.Jobs) != 500 || all.NextBefore == nil {
		t.Errorf("an admin's first page: %d jobs, next_before %v", len(all.Jobs), all.NextBefore)
	}
	// The other views that show jobs agree.
	var n int
	if err := alice.client.Catalog().Pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.tasks WHERE job_id = $1`, own).Scan(&n); err != nil || n != 1 {
		t.Errorf("alice's tasks of her own job: %d (%v)", n, err)
	}
	if err := alice.client.Catalog().Pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.jobs WHERE description LIKE 'hidden %'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("alice sees %d jobs of others (%v)", n, err)
	}
}
