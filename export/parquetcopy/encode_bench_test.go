package parquetcopy

import (
	"context"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// recorder keeps the stream and where each Write (one CopyData message) ended.
type recorder struct {
	data  []byte
	ends  []int
	bytes int64
}

func (r *recorder) Write(p []byte) (int, error) {
	r.data = append(r.data, p...)
	r.ends = append(r.ends, len(r.data))
	r.bytes += int64(len(p))
	return len(p), nil
}

// replay writes the recorded messages to w the way pgconn does: each message is handed over
// from a small read buffer that the kernel just filled (so it is hot in cache).
func (r *recorder) replay(w io.Writer) error {
	buf := make([]byte, 64<<10)
	start := 0
	for i := 0; i < len(r.ends); {
		// Fill buf with as many whole messages as fit (at least one).
		j := i + 1
		for j < len(r.ends) && r.ends[j]-start <= len(buf) {
			j++
		}
		chunk := r.data[start:r.ends[j-1]]
		if len(chunk) > len(buf) {
			buf = make([]byte, len(chunk))
		}
		copy(buf, chunk)
		prev := start
		for k := i; k < j; k++ {
			if _, err := w.Write(buf[prev-start : r.ends[k]-start]); err != nil {
				return err
			}
			prev = r.ends[k]
		}
		start, i = r.ends[j-1], j
	}
	return nil
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
		conn := pgtest.Connect(b, pgtest.Shared(b).DSN(pgtest.NewDatabase(b), pgcluster.Superuser))
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
			return benchStream.rows, benchStream.rec.replay(w)
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
