package parquetcopy

import (
	"context"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// recorder keeps each Write (one CopyData message) as pgconn delivered it.
type recorder struct {
	msgs  [][]byte
	bytes int64
}

func (r *recorder) Write(p []byte) (int, error) {
	r.msgs = append(r.msgs, append([]byte(nil), p...))
	r.bytes += int64(len(p))
	return len(p), nil
}

var benchStream struct {
	once sync.Once
	cols []Column
	rec  recorder
	rows int64
}

// loadBenchStream records the COPY binary stream of a 200,000-row bench table once.
func loadBenchStream(b *testing.B) {
	benchStream.once.Do(func() {
		ctx := context.Background()
		conn := pgtest.Connect(b, pgtest.Shared(b).DSN(pgtest.NewDatabase(b), pgtest.Superuser))
		if err := BenchTable(ctx, conn.PgConn(), "bench_export", 200_000); err != nil {
			b.Fatal(err)
		}
		table := pgx.Identifier{"bench_export"}
		cols, err := Columns(ctx, conn.PgConn(), table)
		if err != nil {
			b.Fatal(err)
		}
		tag, err := conn.PgConn().CopyTo(ctx, &benchStream.rec, CopySQL(table, cols, 0, -1))
		if err != nil {
			b.Fatal(err)
		}
		benchStream.cols, benchStream.rows = cols, tag.RowsAffected()
	})
	if benchStream.cols == nil {
		b.Fatal("no bench stream")
	}
}

func benchEncode(b *testing.B, opts Options) {
	loadBenchStream(b)
	b.SetBytes(benchStream.rec.bytes)
	b.ReportAllocs()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op") }()
	for b.Loop() {
		_, err := write(benchStream.cols, io.Discard, opts, func(w io.Writer) (int64, error) {
			for _, m := range benchStream.rec.msgs {
				if _, err := w.Write(m); err != nil {
					return 0, err
				}
			}
			return benchStream.rows, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode measures the client side of an export (parsing the COPY stream, encoding,
// compressing) without a server: go test -run '^$' -bench Encode ./export/parquetcopy/
func BenchmarkEncode(b *testing.B)       { benchEncode(b, Options{}) }
func BenchmarkEncodeSnappy(b *testing.B) { benchEncode(b, Options{Compression: "snappy"}) }
func BenchmarkEncodeNone(b *testing.B)   { benchEncode(b, Options{Compression: "none"}) }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
