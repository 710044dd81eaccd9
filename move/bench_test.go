package move_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/move"
)

// BenchmarkMoveSchema moves a schema of four tables of 250,000 rows each (about 120 MB of
// heap) between two databases of the logical cluster, with nobody writing, and reports rows
// moved per second and how long the cut-over blocked writes:
//
//	go test ./move -run '^$' -bench MoveSchema -benchtime 1x
func BenchmarkMoveSchema(b *testing.B) {
	for range b.N {
		b.StopTimer()
		e := newMoveEnv(b)
		e.asOwner(e.src, `CREATE SCHEMA big;`)
		for i := range 4 {
			e.asOwner(e.src, fmt.Sprintf(`CREATE TABLE big.t%d (id bigint PRIMARY KEY, doc jsonb, note text);
				INSERT INTO big.t%d SELECT g, jsonb_build_object('g', g, 'tags', jsonb_build_array('a', 'b')), repeat('x', 40)
				FROM generate_series(1, 250000) g;
				CREATE INDEX ON big.t%d ((doc->>'g'));`, i, i, i))
		}
		e.worker(move.Mover{})
		b.StartTimer()
		start := time.Now()
		id := e.submit(move.Request{Schema: "big", From: "g1", To: "g2"})
		if job := e.Wait(id, 10*time.Minute); job.State != deckhandtype.JobFinished {
			b.Fatalf("move %s: %s", job.State, e.lastError(id))
		}
		took := time.Since(start)
		b.StopTimer()
		progress, _, err := e.Client.Catalog().MoveProgress(ctx, mustTask(b, e, id))
		if err != nil || progress.LongestWriteBlockMS == nil {
			b.Fatalf("progress %+v: %v", progress, err)
		}
		b.ReportMetric(float64(progress.RowsCopied)/took.Seconds(), "rows/s")
		b.ReportMetric(float64(*progress.LongestWriteBlockMS), "ms-writes-blocked")
		b.ReportMetric(took.Seconds(), "s/move")
	}
}
