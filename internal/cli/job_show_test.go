package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// job show pages a job's tasks: --tasks-limit of them after --tasks-after, with the attempts
// of those tasks; the JSON keeps id, state and tasks and names the next page.
func TestJobShowPagesTasks(t *testing.T) {
	e := newEnv(t)
	e.worker()
	var tasks []string
	for i := range 5 {
		tasks = append(tasks, fmt.Sprintf(`{"name": "t%d", "kind": "noop"}`, i))
	}
	id := jobID(t, e.runIn(`{"tasks": [`+strings.Join(tasks, ",")+`]}`, "job", "submit", "-"))
	want(t, e.run("job", "wait", id, "--timeout", "30s"), 0)

	var names []string
	next := "0"
	for pages := 0; next != ""; pages++ {
		r := e.run("job", "show", id, "--tasks-limit", "2", "--tasks-after", next, "-o", "json")
		page := decode[jobPage](t, r)
		for _, task := range page.Tasks {
			names = append(names, task.Name)
		}
		if len(page.Attempts) != len(page.Tasks) {
			t.Errorf("page %d: %d attempts of %d tasks", pages, len(page.Attempts), len(page.Tasks))
		}
		next = ""
		if page.Next != nil {
			next = fmt.Sprint(*page.Next)
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(names) != "[t0 t1 t2 t3 t4]" {
		t.Errorf("pages held %v", names)
	}
	if j := e.show(id); len(j.Tasks) != 5 {
		t.Errorf("job show: %d tasks, want all 5", len(j.Tasks))
	}
	r := e.run("job", "show", id, "--tasks-limit", "3")
	want(t, r, 0)
	if !strings.Contains(r.stdout, "(3 tasks shown of 5; the next ones: deckhand job show "+id+" --tasks-after ") {
		t.Errorf("job show --tasks-limit 3 does not say where the rest is:\n%s", r.stdout)
	}
	wantUsage(t, e.run("job", "show", id, "--tasks-limit", "-1"), "--tasks-limit")
}

// jobPage is what a page of `job show -o json` holds besides the job.
type jobPage struct {
	Tasks []struct {
		Name string `json:"name"`
	} `json:"tasks"`
	Attempts []json.RawMessage `json:"attempts"`
	Next     *int64            `json:"next_tasks_after"`
}
