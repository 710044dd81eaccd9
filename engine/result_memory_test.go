package engine_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task's SQL may return as many rows as it likes (SELECT ... FROM generate_series(1, 1e9)):
// the worker, which shares its memory with every other user's running tasks, keeps none of
// them. Held in memory, a result larger than the worker's machine killed the worker, and its
// retries the next workers, one attempt at a time.
func TestAttackHugeResultIsNotHeldInMemory(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	e.Worker(engine.Config{})
	const rows = "SELECT g, repeat('x', 1000) FROM generate_series(1, 200000) g" // 200 MB
	for _, inTx := range []bool{false, true} {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		var peak atomic.Uint64
		done := make(chan struct{})
		go func() {
			var m runtime.MemStats
			for {
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}()
		id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "big", Node: "n1", SQL: rows + "; " + rows, Transaction: &inTx}}})
		job := e.Wait(id, 120*time.Second)
		close(done)
		if job.State != deckhandtype.JobFinished {
			t.Fatalf("transaction %v: job %s", inTx, job.State)
		}
		if grew := int64(peak.Load()) - int64(base.HeapAlloc); grew > 64<<20 {
			t.Errorf("transaction %v: the worker's heap grew by %d MB while the task's 400 MB of rows went by", inTx, grew>>20)
		}
	}
}
