package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A worker dies right after its task committed on the node, and the node is removed from the
// catalog before the leader rescues the attempt (an operator replacing the node's entry). The
// leader can neither end the attempt's session there nor ask the node whether it committed, so
// it must not hand the task back as if nothing had happened: once the node is registered again
// the task would run a second time. It fails instead, saying that its effect is unknown.
func TestOrphanOfARemovedNodeIsNotRunAgain(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE hits (task text)`)
	nodes, err := e.Client.Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %v %+v", err, nodes)
	}
	n1 := nodes[0]
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "in_tx", Node: "n1", SQL: "INSERT INTO hits VALUES ('in_tx')", MaxAttempts: 3},
	}})

	diesAfterNodeCommit(t, e, id)
	if err := e.Client.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}

	// The leader rescues the dead worker's attempt while the node is not registered.
	e.Worker(engine.Config{})
	testenv.Eventually(t, 30*time.Second, func() bool {
		return len(detail(t, e, id).Attempts) == 1 && detail(t, e, id).Attempts[0].Outcome != deckhandtype.OutcomeRunning
	}, "the leader settles the dead worker's attempt")

	// The node comes back under its name.
	n1.Group, n1.MaxTasks = "", 0
	if err := e.Client.AddNode(ctx, n1); err != nil {
		t.Fatal(err)
	}
	job := e.Wait(id, 30*time.Second)
	var n int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the transactional task took effect %d times, want once: %s", n, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	if job.State != deckhandtype.JobFailed || len(d.Attempts) != 1 || d.Attempts[0].Message == nil ||
		!strings.Contains(*d.Attempts[0].Message, "no longer registered") || !strings.Contains(*d.Attempts[0].Message, "effect is unknown") {
		t.Errorf("job %s, attempts: %s; want failed, its one attempt saying the node is no longer registered and the effect unknown",
			job.State, explain(d))
	}
}

// Tasks waiting for a node that has been removed from the catalog can never be claimed: no
// worker reaches a node it has no conninfo for. They fail, saying why, rather than keep
// their job running for ever; their dependents are unscheduled and `job wait` answers.
func TestTasksOfARemovedNodeFail(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	e.AddNode("n2", 4)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: "SELECT 1"},
		{Name: "b", Node: "n1", SQL: "SELECT 2", DependsOn: []string{"a"}},
		{Name: "c", Node: "n2", SQL: "SELECT 3"},
	}})
	if err := e.Client.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{})
	job := e.Wait(id, 30*time.Second)
	d := detail(t, e, id)
	states := map[string]deckhandtype.TaskState{}
	for _, task := range d.Tasks {
		states[task.Name] = task.State
	}
	if job.State != deckhandtype.JobFailed || states["a"] != deckhandtype.TaskFailed ||
		states["b"] != deckhandtype.TaskUnscheduled || states["c"] != deckhandtype.TaskDone {
		t.Fatalf("job %s, tasks %v; want failed: a failed, b unscheduled, c done", job.State, states)
	}
	said := false
	for _, a := range d.Attempts {
		said = said || a.TaskName == "a" && a.Message != nil && strings.Contains(*a.Message, "node n1 is no longer registered")
	}
	if !said {
		t.Errorf("attempts: %s; want a's saying that node n1 is no longer registered", explain(d))
	}
}
