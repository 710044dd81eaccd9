package engine_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// The leader takes a removed node's runnable task (it is then running, held by the leader)
// and fails to record its failure: the catalog refuses that one statement (a restart, a
// statement timeout). The leader's lease stays fresh, so no rescue will ever settle the task
// it holds and never started: the leader must settle it itself, or the job never ends.
func TestStrandedTaskIsFailedWhenItsFirstRecordingFails(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}})
	if err := e.Client.RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	// The first completion the worker sends (no task runs: it is the stranded task's) fails.
	proxy.AddRule(pgtest.Rule{Name: "complete", Match: regexp.MustCompile(`AS i\(id, token, worker_id, outcome`),
		Action: pgtest.ActionError, Code: "57014", Message: "canceling statement due to statement timeout", Times: 1})
	cat, err := catalog.Open(ctx, proxy.DSN(e.DB, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{MaintenanceInterval: 100 * time.Millisecond, Logger: testenv.Quiet()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	testenv.Eventually(t, 20*time.Second, func() bool { return proxy.Hits("complete") == 1 }, "the leader fails the stranded task, and that fails")
	job := e.Wait(id, 20*time.Second)
	if d := detail(t, e, id); job.State != deckhandtype.JobFailed || d.Tasks[0].State != deckhandtype.TaskFailed {
		t.Fatalf("job %s: %s; want failed, its task failed", job.State, explain(d))
	}
}
