package cli_test

import (
	"sync"
	"testing"

	"github.com/deckhandhq/deckhand/internal/testenv"
)

// Two processes run `deckhand move` of one schema at the same moment: the catalog writes one
// job; the other process exits 2 with the one line a later `deckhand move` of it prints.
func TestMoveAdmitsOneJobOfConcurrentSubmissions(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.AddNode("n2", 4)

	for round := range 5 {
		schema := "tenant_" + string(rune('a'+round))
		args := []string{"move", "--schema", schema, "--from", "n1", "--to", "n2"}
		var wg sync.WaitGroup
		results := make([]result, 2)
		start := make(chan struct{})
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i] = runBinary(t, bin, e.DSN, args...)
			}()
		}
		close(start)
		wg.Wait()
		won, lost := results[0], results[1]
		if won.code != 0 {
			won, lost = lost, won
		}
		id := jobID(t, won)
		line := `task "move": schema ` + schema + " is already being moved by job " + id
		wantUsage(t, lost, line)
		later := e.run(args...)
		wantUsage(t, later, line)
		if lost.stderr != later.stderr {
			t.Errorf("round %d: the concurrent move was refused with %q, a later one with %q", round, lost.stderr, later.stderr)
		}
	}
}
