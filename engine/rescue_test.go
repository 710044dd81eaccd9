package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A node that does not answer holds up only its own orphans: the rescue of a dead worker's
// other tasks, and of a worker that dies later, goes on meanwhile. Settled one after another
// in the leader's round, the five orphans on the silent node below took 10 s each before any
// other, and the round with them.
func TestSilentNodeHoldsUpOnlyItsOwnOrphans(t *testing.T) {
	e := testenv.New(t)
	silent := deckhandtype.Node{Name: "a-silent", MaxTasks: 8,
		DSN: fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres user=nobody sslmode=disable", silentListener(t))}
	if err := e.Client.AddNode(ctx, silent); err != nil {
		t.Fatal(err)
	}
	db := e.Pool(e.DB)
	orphan := func(node string, worker int64) catalogtest.TaskOpts {
		return catalogtest.TaskOpts{Kind: "noop", Node: node, State: deckhandtype.TaskRunning, Attempts: 1, WorkerID: worker}
	}
	dead := catalogtest.Worker(ctx, t, db, &catalogtest.WorkerOpts{LeaseExpiresAt: time.Now().Add(-time.Second)})
	var onSilent []catalogtest.TaskOpts
	for range 5 {
		onSilent = append(onSilent, orphan("a-silent", dead))
	}
	catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: onSilent})
	freeJob := catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: []catalogtest.TaskOpts{orphan("", dead)}})
	diesLater := catalogtest.Worker(ctx, t, db, &catalogtest.WorkerOpts{LeaseExpiresAt: time.Now().Add(3 * time.Second)})
	laterJob := catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: []catalogtest.TaskOpts{orphan("", diesLater)}})

	began := time.Now()
	e.Worker(engine.Config{})
	if got := e.Wait(freeJob.ID, 4*time.Second); got.State != deckhandtype.JobFinished {
		t.Fatalf("the dead worker's task on no node: job %s, want it rescued and run again at once", got.State)
	}
	if got := e.Wait(laterJob.ID, 7*time.Second); got.State != deckhandtype.JobFinished {
		t.Fatalf("the task of a worker that died 3 s in: job %s, want it rescued while the silent node's orphans wait", got.State)
	}
	t.Logf("both rescued and run %s after the leader started", time.Since(began).Round(time.Millisecond))
	var running int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM deckhand.task WHERE node = 'a-silent' AND state = 'running'`).Scan(&running); err != nil || running != 5 {
		t.Errorf("%d (%v) of the silent node's orphans still running, want all 5: none can be settled while the node does not answer", running, err)
	}
}

// Sixteen silent nodes (an outage of a zone, say) whose orphans come first never keep the rest
// waiting: tasks on no node are settled in the round itself, and nodes found unreachable take
// half of the rescue slots at most. Before, each round restarted the silent nodes' rescues the
// moment they ended and found every slot taken by the time it reached any other orphan.
func TestSixteenSilentNodesStarveNoOtherRescue(t *testing.T) {
	e := testenv.New(t)
	port := silentListener(t)
	db := e.Pool(e.DB)
	dead := catalogtest.Worker(ctx, t, db, &catalogtest.WorkerOpts{LeaseExpiresAt: time.Now().Add(-time.Second)})
	var onSilent []catalogtest.TaskOpts
	for i := range 16 {
		// Distinct conninfos (rescue groups by conninfo), the same silent port.
		n := deckhandtype.Node{Name: fmt.Sprintf("a-silent-%02d", i), MaxTasks: 8,
			DSN: fmt.Sprintf("host=127.0.0.1 port=%d dbname=db%02d user=nobody sslmode=disable", port, i)}
		if err := e.Client.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		onSilent = append(onSilent, catalogtest.TaskOpts{Kind: "noop", Node: n.Name, State: deckhandtype.TaskRunning, Attempts: 1, WorkerID: dead})
	}
	catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: onSilent})
	free := catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: []catalogtest.TaskOpts{
		{Kind: "noop", State: deckhandtype.TaskRunning, Attempts: 1, WorkerID: dead}}})

	e.Worker(engine.Config{})
	// Two whole rounds of the silent nodes' 10 s connect timeouts.
	if got := e.Wait(free.ID, 25*time.Second); got.State != deckhandtype.JobFinished {
		t.Fatalf("the dead worker's task on no node: job %s, want it rescued while the silent nodes' orphans wait", got.State)
	}
}
