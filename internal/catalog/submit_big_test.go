package catalog_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A large fan-out/fan-in is written as a small one is: ids grow along the spec, every task
// knows how many tasks it waits for and whether any waits for it, and each dependency is one
// row of task_dep. Its problems are reported in spec order, also far down a long list.
func TestSubmitBigFanOutFanIn(t *testing.T) {
	const n = 20_000
	cat := migratedCatalog(t)
	task := func(name string, deps ...string) catalog.NewTask {
		return catalog.NewTask{Name: name, Kind: "noop", MaxAttempts: 1, Timeout: time.Hour, DependsOn: deps}
	}
	fan := func() catalog.NewJob {
		job := catalog.NewJob{Description: "fan-out/fan-in", Kind: "noop", Tasks: []catalog.NewTask{task("start")}}
		var middle []string
		for i := 1; i < n-1; i++ {
			name := "t" + strconv.Itoa(i)
			job.Tasks = append(job.Tasks, task(name, "start"))
			middle = append(middle, name)
		}
		job.Tasks = append(job.Tasks, task("end", middle...))
		return job
	}
	id, err := cat.InsertJob(ctx, fan())
	if err != nil {
		t.Fatal(err)
	}
	var tasks, inOrder, startOK, middleOK, endOK, deps, depsForward int
	err = cat.Pool.QueryRow(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE name = CASE WHEN rn = 1 THEN 'start' WHEN rn = $2 THEN 'end' ELSE 't' || (rn - 1) END),
		       count(*) FILTER (WHERE name = 'start' AND state = 'runnable' AND pending_deps = 0 AND has_dependents),
		       count(*) FILTER (WHERE name LIKE 't%' AND state = 'blocked' AND pending_deps = 1 AND has_dependents),
		       count(*) FILTER (WHERE name = 'end' AND state = 'blocked' AND pending_deps = $2 - 2 AND NOT has_dependents)
		FROM (SELECT *, row_number() OVER (ORDER BY id) AS rn FROM deckhand.task WHERE job_id = $1) t`, id, n).
		Scan(&tasks, &inOrder, &startOK, &middleOK, &endOK)
	if err != nil {
		t.Fatal(err)
	}
	if tasks != n || inOrder != n || startOK != 1 || middleOK != n-2 || endOK != 1 {
		t.Fatalf("tasks %d, in spec order %d, start right %d, middle right %d (want %d), end right %d",
			tasks, inOrder, startOK, middleOK, n-2, endOK)
	}
	err = cat.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE d.depends_on < d.task_id AND p.job_id = $1 AND (p.name = 'start' OR c.name = 'end'))
		FROM deckhand.task_dep d JOIN deckhand.task c ON c.id = d.task_id JOIN deckhand.task p ON p.id = d.depends_on
		WHERE c.job_id = $1`, id).Scan(&deps, &depsForward)
	if err != nil {
		t.Fatal(err)
	}
	if deps != 2*(n-2) || depsForward != deps {
		t.Fatalf("task_dep rows %d, from start or to end and forward %d, want %d", deps, depsForward, 2*(n-2))
	}

	for _, c := range []struct {
		name   string
		change func(*catalog.NewJob)
		want   string
	}{
		{"listed twice at the end", func(j *catalog.NewJob) {
			end := &j.Tasks[n-1]
			end.DependsOn = append(end.DependsOn, "t7")
		}, `task 'end': depends_on lists 't7' twice`},
		{"unknown before listed twice", func(j *catalog.NewJob) {
			j.Tasks[n-1].DependsOn = append(j.Tasks[n-1].DependsOn, "t7")
			j.Tasks[n-2].DependsOn = []string{"start", "nowhere"}
		}, `task 't19998': depends on unknown task 'nowhere'`},
		{"listed after", func(j *catalog.NewJob) {
			j.Tasks[5].DependsOn = []string{"t9"}
		}, `task 't5': depends on 't9', which is listed after it: list every task after the tasks it depends on`},
		{"itself", func(j *catalog.NewJob) {
			j.Tasks[n-1].DependsOn[n-3] = "end"
		}, `task 'end': depends on itself`},
	} {
		job := fan()
		c.change(&job)
		_, err := cat.InsertJob(ctx, job)
		if !errors.Is(err, catalog.ErrInvalid) || err.Error() != c.want {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}
