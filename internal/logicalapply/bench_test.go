package logicalapply_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// BenchmarkApply measures how fast a backlog of b.N changes (half inserts, half updates of
// those rows) waiting in the slot is applied, in source transactions of one row and of 100
// rows. Run it with a fixed count, e.g.
//
//	go test ./internal/logicalapply/ -run '^$' -bench Apply -benchtime 100000x
func BenchmarkApply(b *testing.B) {
	for _, rows := range []int{1, 100} {
		b.Run(fmt.Sprintf("rows_per_tx=%d", rows), func(b *testing.B) { benchApply(b, rows) })
	}
}

func benchApply(b *testing.B, rowsPerTx int) {
	e := newEnv(b)
	ctx := pgtest.Context(b, 10*time.Minute)
	gen := e.ownerConn(e.src)
	inserts := (b.N + 1) / 2
	// Source transactions of rowsPerTx rows each, sent in pipelines of explicit transactions.
	queue := func(sql string, total int) {
		batch := &pgx.Batch{}
		flush := func() {
			if err := gen.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
			batch = &pgx.Batch{}
		}
		for from := 1; from <= total; from += rowsPerTx {
			batch.Queue("BEGIN")
			batch.Queue(sql, from, min(from+rowsPerTx-1, total))
			batch.Queue("COMMIT")
			if batch.Len() >= 3000 {
				flush()
			}
		}
		flush()
	}
	queue(`INSERT INTO app.bench SELECT g, 'note ' || g, g * 0.5, '2026-01-01'::timestamptz + g * interval '1 second' FROM generate_series($1::int, $2::int) g`, inserts)
	queue(`UPDATE app.bench SET note = note || ' updated', amount = amount + 1 WHERE id BETWEEN $1 AND $2`, b.N-inserts)
	lsn := e.sourceLSN()

	src, dst, err := e.conns(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(context.Background())
	defer dst.Close(context.Background())
	a := logicalapply.New(logicalapply.Config{Source: src, Slot: e.slot, Publication: e.pub, Target: dst,
		ProgressTable: e.progress, Logger: testLogger()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		done <- a.Run(runCtx, e.consistent)
	}()
	defer func() { stop(); <-exited }() // before the connections close
	if err := a.WaitApplied(ctx, lsn); err != nil {
		b.Fatalf("waiting for %s (applied %s): %v", lsn, a.Applied(), err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	st := a.Stats()
	if st.Changes < int64(b.N) {
		b.Fatalf("applied %d changes of %d", st.Changes, b.N)
	}
	b.ReportMetric(float64(st.Changes)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(st.Commits), "target-commits")
	e.sameContents()
}
