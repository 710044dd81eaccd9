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
