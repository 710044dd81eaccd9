package move_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A job of several moves (as a rebalance's) whose one move fails for good frees that move's
// objects only: its sibling, still copying, keeps its mark, so no other job may begin moving
// the sibling's schema meanwhile.
func TestFailedMoveLeavesItsSiblingsMarks(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA a; CREATE TABLE a.t (id int PRIMARY KEY);
		CREATE SCHEMA b; CREATE TABLE b.t (id int PRIMARY KEY)`)
	tasks := e.schemaMoves(1, "a", "b")
	var mu sync.Mutex
	copies := 0
	failed := make(chan struct{})
	var seen []deckhandtype.PlacementMove
	var seenErr error
	// The first move to end its copy fails for good; the second waits until that failure is
	// settled, reads the moves under way, then fails too.
	e.worker(move.Mover{AfterStep: func(ctx context.Context, step string) error {
		if step != move.StepCopy {
			return nil
		}
		mu.Lock()
		copies++
		first := copies == 1
		mu.Unlock()
		if first {
			return taskerr.Permanent(errors.New("injected failure of the first move"))
		}
		select {
		case <-failed:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		seen, seenErr = e.Client.Catalog().MovesUnderWay(ctx)
		mu.Unlock()
		return taskerr.Permanent(errors.New("injected failure of the second move"))
	}})
	id := e.Submit(&spec.Job{Description: "two moves", Tasks: tasks})
	// The first failure is settled (its marks cleared) before its result is recorded.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d, err := e.Client.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, task := range d.Tasks {
			if task.State == deckhandtype.TaskFailed {
				ended++
			}
		}
		if ended > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no move of job %d failed: %+v", id, d.Tasks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(failed)
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %d: %s, want failed", id, job.State)
	}
	mu.Lock()
	defer mu.Unlock()
	if seenErr != nil {
		t.Fatal(seenErr)
	}
	if len(seen) != 1 || seen[0].JobID != id {
		t.Errorf("while the second move still ran, the moves under way were %+v; want its own schema alone, moved by job %d", seen, id)
	}
}
