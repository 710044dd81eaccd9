package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/spec"
)

// A job's tasks come a page at a time, in id order, each page with its tasks' attempts; the
// last page says there is no next one. A job may have a million tasks.
func TestJobDetailPagesTasks(t *testing.T) {
	h := newHarness(t)
	h.worker()
	j := &spec.Job{Description: "five", Tasks: make([]spec.Task, 5)}
	for i := range j.Tasks {
		j.Tasks[i] = spec.Task{Name: fmt.Sprintf("t%d", i), Kind: spec.KindNoop}
	}
	id := h.submit(j)
	h.Wait(id, 30*time.Second)

	var names []string
	after := int64(0)
	for pages := 0; ; pages++ {
		var d api.JobDetail
		h.mustGet(fmt.Sprintf("/api/jobs/%d?tasks_limit=2&tasks_after=%d", id, after), &d)
		if len(d.Attempts) != len(d.Tasks) {
			t.Errorf("page %d: %d attempts of %d tasks", pages, len(d.Attempts), len(d.Tasks))
		}
		for _, task := range d.Tasks {
			names = append(names, task.Name)
		}
		if d.NextTasksAfter == nil {
			break
		}
		after = *d.NextTasksAfter
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(names) != "[t0 t1 t2 t3 t4]" {
		t.Errorf("pages held %v", names)
	}
	var all api.JobDetail
	h.mustGet(fmt.Sprintf("/api/jobs/%d", id), &all)
	if len(all.Tasks) != 5 || all.NextTasksAfter != nil || all.TasksTotal != 5 {
		t.Errorf("default page: %d tasks, next %v", len(all.Tasks), all.NextTasksAfter)
	}
	for _, q := range []string{"tasks_limit=0", fmt.Sprintf("tasks_limit=%d", api.MaxTasksPage+1), "tasks_after=-1", "tasks_after=x"} {
		if r := h.get(fmt.Sprintf("/api/jobs/%d?%s", id, q)); r.code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s", q, r.code, r.body)
		}
	}
}
