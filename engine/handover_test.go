package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// Short tasks on a busy node pass its slots from one to the next in the worker (tasks claimed
// ahead), and the node still never runs more than its max_tasks, with two workers competing.
func TestHandedOverSlotsKeepTheNodeLimit(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n", 2)
	e.Exec(db, `CREATE TABLE span (started timestamptz, ended timestamptz)`)
	metrics := []*engine.Metrics{engine.NewMetrics(nil), engine.NewMetrics(nil)}
	for _, m := range metrics {
		e.Worker(engine.Config{Concurrency: 10, Metrics: m})
	}
	id := submit(t, e, &spec.Job{Tasks: spanTasks("n", 300, 0.002)})
	if job := e.Wait(id, 120*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	var peak, rows int
	if err := e.Pool(db).QueryRow(ctx, `
		SELECT max(n), count(*) FROM (SELECT (SELECT count(*) FROM span o WHERE o.started <= s.started AND o.ended > s.started) AS n
		FROM span s) x`).Scan(&peak, &rows); err != nil {
		t.Fatal(err)
	}
	if rows != 300 || peak > 2 {
		t.Errorf("%d tasks ran, at most %d at once on a node of max_tasks 2; want 300, at most 2", rows, peak)
	}
	var ahead, handed float64
	for _, m := range metrics {
		ahead += counted(t, m.ClaimedAhead)
		handed += counted(t, m.HandedOver)
	}
	if ahead == 0 || handed == 0 {
		t.Errorf("%v tasks claimed ahead, %v slots handed over: the slots never passed from task to task in a worker", ahead, handed)
	}
	t.Logf("%v tasks claimed ahead, %v slots handed over", ahead, handed)
	var left int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM deckhand.task WHERE queued`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d ended tasks still marked queued", left)
	}
}

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// spanTasks are n tasks on node that each sleep for seconds and record when they ran on the
// node in its table span (started, ended).
func spanTasks(node string, n int, seconds float64) []spec.Task {
	tasks := make([]spec.Task, n)
	for i := range tasks {
		tasks[i] = spec.Task{
			Name: fmt.Sprintf("t%d", i), Node: node,
			SQL: fmt.Sprintf(`DO $$ DECLARE s timestamptz := clock_timestamp(); BEGIN PERFORM pg_sleep(%g);
			      INSERT INTO span VALUES (s, clock_timestamp()); END $$`, seconds),
		}
	}
	return tasks
}
