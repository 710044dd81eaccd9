package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A transactional task whose SQL ends while the catalog is away (a restart, a failover) waits
// for the catalog to record its node transaction and then commits: the work is neither rolled
// back nor charged an attempt, as "running tasks keep running" promises. With one attempt
// allowed, a rollback would fail the job.
func TestTransactionEndingDuringCatalogOutageCommits(t *testing.T) {
	e := testenv.NewRestartable(t, pgcluster.Options{})
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE marks (n int)`)
	e.Serve("--lease", "30s", "--maintenance-interval", "100ms", "--concurrency", "2")
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", MaxAttempts: 1,
		SQL: `SELECT pg_sleep(2); INSERT INTO marks VALUES (1)`}}})
	waitSleeping(t, e, db, 1)
	if err := e.CatalogCluster.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// The task's INSERT runs, and its transaction asks to be recorded, while the catalog is down.
	time.Sleep(4 * time.Second)
	if err := e.CatalogCluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, want finished:%s", job.State, explain(detail(t, e, id)))
	}
	if d := detail(t, e, id); len(d.Attempts) != 1 {
		t.Errorf("%d attempts, want one:%s", len(d.Attempts), explain(d))
	}
	var marks int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM marks`).Scan(&marks); err != nil || marks != 1 {
		t.Errorf("%d marks (%v), want the task's once", marks, err)
	}
}
