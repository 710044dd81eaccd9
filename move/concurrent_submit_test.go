package move_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// moveSubmission is a job that moves something of a schema, as one submission path shapes it,
// and the line it is refused with while job holder moves that.
type moveSubmission struct {
	job     *spec.Job
	refusal func(holder int64) string
}

// Two jobs that move one schema (or a table of it), submitted at the same moment by two
// clients as two processes would: exactly one is admitted, and the other is refused at
// submission with the line a later submission gets. No worker runs, so neither move has begun
// (nor marked anything) when the other is checked.
func TestConcurrentMovesOfOneObjectAdmitOne(t *testing.T) {
	e := newMoveEnv(t)
	other, err := engine.Open(ctx, e.DSN, move.Feature())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	clients := [2]*engine.Client{e.Client, other}

	request := func(r move.Request, name string) spec.Task {
		r.From, r.To, r.Owner = "g1", "g2", e.owner
		task, err := r.Task(name)
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	// What `deckhand move --schema` submits (move.Start).
	schemaMove := func(s string) moveSubmission {
		return moveSubmission{
			job: &spec.Job{Kind: move.Kind, Tasks: []spec.Task{request(move.Request{Schema: s}, "move")}},
			refusal: func(h int64) string {
				return fmt.Sprintf(`task "move": schema %s is already being moved by job %d`, s, h)
			},
		}
	}
	// A job spec with a move task of one table.
	tableMove := func(s string) moveSubmission {
		return moveSubmission{
			job: &spec.Job{Tasks: []spec.Task{{Name: "first", Kind: spec.KindNoop},
				request(move.Request{Tables: []string{s + ".t"}}, "relocate")}},
			refusal: func(h int64) string {
				return fmt.Sprintf(`task "relocate": table %s.t is already being moved by job %d`, s, h)
			},
		}
	}
	// A rebalance's job: moves of several schemas, this one last.
	rebalance := func(s string) moveSubmission {
		return moveSubmission{
			job: &spec.Job{Kind: "rebalance", Tasks: e.schemaMoves(1, s+"_neighbour", s)},
			refusal: func(h int64) string {
				return fmt.Sprintf(`task "move-%s": schema %s is already being moved by job %d`, s, s, h)
			},
		}
	}
	pairs := [][2]func(string) moveSubmission{
		{schemaMove, schemaMove}, {schemaMove, tableMove}, {tableMove, tableMove},
		{rebalance, tableMove}, {rebalance, schemaMove},
	}
	for round := range 3 * len(pairs) {
		s := fmt.Sprintf("race_%d", round)
		subs := [2]moveSubmission{pairs[round%len(pairs)][0](s), pairs[round%len(pairs)][1](s)}
		var ids [2]int64
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids[i], errs[i] = clients[i].Submit(ctx, subs[i].job)
			}()
		}
		close(start)
		wg.Wait()
		won, lost := 0, 1
		if errs[0] != nil {
			won, lost = 1, 0
		}
		if errs[won] != nil || errs[lost] == nil {
			t.Errorf("round %d: submissions gave job %d (%v) and job %d (%v); want one admitted", round, ids[0], errs[0], ids[1], errs[1])
			continue
		}
		want := subs[lost].refusal(ids[won])
		if !engine.IsInvalid(errs[lost]) || errs[lost].Error() != want {
			t.Errorf("round %d: the second submission was refused with %q; want bad input, %q", round, errs[lost], want)
		}
		// Submitted again, after the other, it is refused with the same line.
		if id, err := clients[lost].Submit(ctx, subs[lost].job); err == nil || err.Error() != want {
			t.Errorf("round %d: a later submission = job %d, %v; want %q", round, id, err, want)
		}
		var jobs int
		if err := e.Client.Catalog().Pool.QueryRow(ctx, `
			SELECT count(DISTINCT job_id) FROM deckhand.task WHERE kind = 'move'
			AND (payload ->> 'schema' = $1 OR payload -> 'tables' -> 0 ->> 0 = $1)`, s).Scan(&jobs); err != nil || jobs != 1 {
			t.Errorf("round %d: %d jobs move schema %s (%v), want 1", round, jobs, s, err)
		}
	}
}
