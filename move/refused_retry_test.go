package move_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A move whose first attempt fails after marking its schema, and whose retry is refused before
// it begins anything (the name now exists on another group), frees its mark at once: its
// sibling in the job, still copying, is the only move under way.
func TestMoveRefusedOnItsRetryFreesItsMark(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA a; CREATE TABLE a.t (id int PRIMARY KEY);
		CREATE SCHEMA b; CREATE TABLE b.t (id int PRIMARY KEY)`)
	other := testenv.Database(t, e.NodeCluster, "other")
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "other", DSN: e.Proxy.DSN(other, pgcluster.Superuser), Group: "g3", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	tasks := e.schemaMoves(2, "a", "b")
	var (
		mu         sync.Mutex
		structures int
		seen       []deckhandtype.PlacementMove
		seenErr    error
	)
	checked := make(chan struct{})
	// The first move to create its structure fails there, retryably, once both names exist on
	// g3: its retry is refused. The other waits at its copy until the test has looked.
	e.worker(move.Mover{AfterStep: func(ctx context.Context, step string) error {
		switch step {
		case move.StepStructure:
			mu.Lock()
			structures++
			first := structures == 1
			mu.Unlock()
			if first {
				e.NodeExec(other, `CREATE SCHEMA a; CREATE SCHEMA b`)
				return errors.New("injected failure of a first attempt")
			}
		case move.StepCopy:
			select {
			case <-checked:
			case <-ctx.Done():
				return ctx.Err()
			}
			return taskerr.Permanent(errors.New("injected failure of the other move"))
		}
		return nil
	}})
	id := e.Submit(&spec.Job{Description: "two moves", Tasks: tasks})
	testenv.Eventually(t, 2*time.Minute, func() bool {
		d, err := e.Client.Job(ctx, id)
		if err != nil {
			return false
		}
		for _, task := range d.Tasks {
			if task.State == deckhandtype.TaskFailed {
				return true
			}
		}
		return false
	}, "the refused move has failed")
	mu.Lock()
	seen, seenErr = e.Client.Catalog().MovesUnderWay(ctx)
	mu.Unlock()
	close(checked)
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %d: %s, want failed", id, job.State)
	}
	mu.Lock()
	defer mu.Unlock()
	if seenErr != nil {
		t.Fatal(seenErr)
	}
	if len(seen) != 1 || seen[0].JobID != id {
		t.Errorf("after the refused retry, while the other move still ran, the moves under way were %+v; want the other's schema alone", seen)
	}
	if structures < 2 {
		t.Errorf("%d structure steps ran; want the other move's besides the failed first attempt", structures)
	}
}
