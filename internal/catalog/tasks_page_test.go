package catalog_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A page of a big job's tasks lists the prerequisites of the page's tasks alone, not of every
// task of the job (the view is a security barrier, which a page's LIMIT does not enter).
func TestATaskPageListsThePrerequisitesOfItsTasksAlone(t *testing.T) {
	const tasks, page = 5000, 100
	cat := migratedCatalog(t)
	job := catalog.NewJob{Description: "chain", Kind: "noop"}
	for i := range tasks {
		task := catalog.NewTask{Name: "t" + strconv.Itoa(i), Kind: "noop", Owner: "app", MaxAttempts: 1, Timeout: time.Hour}
		if i > 0 {
			task.DependsOn = []string{"t" + strconv.Itoa(i-1)}
		}
		job.Tasks = append(job.Tasks, task)
	}
	id, err := cat.InsertJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	var first int64
	if err := cat.Pool.QueryRow(ctx, `SELECT min(id) FROM deckhand.task WHERE job_id = $1`, id).Scan(&first); err != nil {
		t.Fatal(err)
	}
	var out []byte
	after := first + tasks/2
	if err := cat.Pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+catalog.TasksPageSQL, id, after, page).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var tree []map[string]any
	if err := json.Unmarshal(out, &tree); err != nil || len(tree) != 1 {
		t.Fatalf("EXPLAIN: %v", err)
	}
	plan := tree[0]["Plan"].(map[string]any)
	if rows, _ := plan["Actual Rows"].(float64); rows != page {
		t.Errorf("the page holds %.0f tasks, want %d", rows, page)
	}
	if runs := subPlanRuns(plan); runs > 2*page {
		t.Errorf("a page of %d tasks of a job of %d ran the views' subplans %.0f times", page, tasks, runs)
	}
	got, err := cat.Tasks(ctx, id, deckhandtype.TaskPage{After: after, Limit: page})
	if err != nil || len(got) != page || got[0].ID != after+1 || len(got[0].DependsOn) != 1 {
		t.Fatalf("page after task %d: %d tasks (%v), want %d from task %d, each with its prerequisite", after, len(got), err, page, after+1)
	}
}

// subPlanRuns is how many times the subplans of a plan ran, over all their loops.
func subPlanRuns(node map[string]any) float64 {
	var n float64
	if node["Parent Relationship"] == "SubPlan" {
		n, _ = node["Actual Loops"].(float64)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += subPlanRuns(c.(map[string]any))
	}
	return n
}
