package engine

import (
	"maps"
	"testing"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A worker asks a claim for tasks ahead only where its tasks turned over since its last claim:
// one waiting task per slot it holds there (or per task that ended, if more did), and
// fastTurnoverDepth per slot where its slots turned over at least as fast as its claims came
// back, less the tasks already waiting.
func TestAheadWantedDeepensWhereSlotsTurnOverFast(t *testing.T) {
	waiting := func(n int) []*waitingTask { return make([]*waitingTask, n) }
	w := &Worker{slots: map[string]*nodeSlots{
		"fast":          {holding: 16, turnover: 20},
		"as-fast":       {holding: 16, turnover: 16, waiting: waiting(10)},
		"slow":          {holding: 16, turnover: 1},
		"slow-waiting":  {holding: 16, turnover: 3, waiting: waiting(16)},
		"one-slot":      {holding: 0, turnover: 1},
		"one-slot-fast": {holding: 1, turnover: 2},
		"idle":          {holding: 4},
	}}
	want := catalog.Ahead{
		"fast":          fastTurnoverDepth * 20,
		"as-fast":       fastTurnoverDepth*16 - 10,
		"slow":          16,
		"one-slot":      1,
		"one-slot-fast": fastTurnoverDepth * 2,
	}
	if got := w.aheadWanted(); !maps.Equal(got, want) {
		t.Fatalf("ahead %v, want %v", got, want)
	}
	// The turnover is counted again from this claim on: without tasks ending, the next claim
	// asks for nothing ahead.
	if got := w.aheadWanted(); len(got) != 0 {
		t.Fatalf("ahead %v with no task ended since the last claim", got)
	}
}
