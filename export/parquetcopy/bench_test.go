package parquetcopy_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parquet-go/parquet-go"

	"github.com/deckhandhq/deckhand/export/parquetcopy"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// TestExportBenchmark compares exporting a 2,000,000-row mixed-type table to zstd Parquet in
// parallel parts with a plain single-connection `COPY ... TO STDOUT (FORMAT binary)` into
// io.Discard. It runs only with DECKHAND_BENCH_EXPORT=1:
//
//	DECKHAND_BENCH_EXPORT=1 go test -run TestExportBenchmark -v -timeout 30m ./export/parquetcopy/
//
// DECKHAND_BENCH_ROWS, DECKHAND_BENCH_PARTS (comma-separated list) and DECKHAND_BENCH_RUNS
// change the row count, the part counts tried and the repetitions. The baseline and the
// exports run interleaved, so that load from elsewhere on the machine hits them alike; best
// and median times are reported, with the CPU time the server backends and this process
// used. DECKHAND_BENCH_CPUPROFILE writes a CPU profile of the measured runs, and
// DECKHAND_EXPORT_KEEP names a directory to keep the part files in.
func TestExportBenchmark(t *testing.T) {
	if os.Getenv("DECKHAND_BENCH_EXPORT") != "1" {
		t.Skip("set DECKHAND_BENCH_EXPORT=1 to run the export benchmark")
	}
	rows := envInt(t, "DECKHAND_BENCH_ROWS", 2_000_000)
	runs := envInt(t, "DECKHAND_BENCH_RUNS", 5)
	partCounts := []int{2, 3, 4}
	if s := os.Getenv("DECKHAND_BENCH_PARTS"); s != "" {
		partCounts = nil
		for _, f := range splitComma(s) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			partCounts = append(partCounts, n)
		}
	}
	ctx := context.Background()
	cl := pgtest.New(t, pgcluster.Options{Durable: true})
	dsn := cl.DSN("postgres", pgcluster.Superuser)
	admin := pgtest.Connect(t, dsn)
	start := time.Now()
	if err := parquetcopy.BenchTable(ctx, admin.PgConn(), "bench_export", rows); err != nil {
		t.Fatal(err)
	}
	// Flush the load's dirty pages now rather than during the measurements.
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	var heap int64
	if err := admin.QueryRow(ctx, `SELECT pg_relation_size('bench_export')`).Scan(&heap); err != nil {
		t.Fatal(err)
	}
	t.Logf("table: %d rows, heap %.1f MB, built in %v", rows, float64(heap)/1e6, time.Since(start).Round(time.Millisecond))
	table := pgx.Identifier{"bench_export"}
	cols, err := parquetcopy.Columns(ctx, admin.PgConn(), table)
	if err != nil {
		t.Fatal(err)
	}
	whole := parquetcopy.CopySQL(table, cols, 0, -1)

	conns := make([]*pgconn.PgConn, slices.Max(partCounts))
	pids := make([]int, len(conns))
	for i := range conns {
		c := pgtest.Connect(t, dsn)
		conns[i] = c.PgConn()
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
			t.Fatal(err)
		}
	}
	// serverCPU is the CPU time the first n backends have used so far.
	serverCPU := func(n int) time.Duration {
		var d time.Duration
		for _, pid := range pids[:n] {
			d += procCPU(pid)
		}
		return d
	}
	copyDiscard := func() time.Duration {
		t0 := time.Now()
		tag, err := conns[0].CopyTo(ctx, io.Discard, whole)
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() != int64(rows) {
			t.Fatalf("COPY: %d rows", tag.RowsAffected())
		}
		return time.Since(t0)
	}
	copyDiscard() // warm the caches
	dir := t.TempDir()
	if keep := os.Getenv("DECKHAND_EXPORT_KEEP"); keep != "" {
		dir = keep // to check the files with other readers
	}
	export := func(parts int) (time.Duration, int64) {
		ranges, err := parquetcopy.SplitPages(ctx, conns[0], table, parts)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(ranges))
		stats := make([]parquetcopy.Stats, len(ranges))
		t0 := time.Now()
		for i, r := range ranges {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", i)))
				if err != nil {
					errs[i] = err
					return
				}
				stats[i], errs[i] = parquetcopy.Write(ctx, conns[i], parquetcopy.CopySQL(table, cols, r.Start, r.End), cols, f, parquetcopy.Options{})
				if err := f.Close(); errs[i] == nil {
					errs[i] = err
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		var total, size int64
		for i := range ranges {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			total += stats[i].Rows
			size += stats[i].Bytes
		}
		if total != int64(rows) {
			t.Fatalf("exported %d rows, want %d", total, rows)
		}
		return d, size
	}
	if path := os.Getenv("DECKHAND_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	// Interleave the runs, so that load from elsewhere on the machine hits both alike.
	var base []time.Duration
	exports := make(map[int][]time.Duration)
	clientCPU := make(map[int]time.Duration)
	srvCPU := make(map[int]time.Duration)
	var baseClient, baseServer time.Duration
	var size int64
	for range runs {
		c0, s0 := cpuTime(), serverCPU(1)
		base = append(base, copyDiscard())
		baseClient += cpuTime() - c0
		baseServer += serverCPU(1) - s0
		for _, parts := range partCounts {
			c0, s0 := cpuTime(), serverCPU(parts)
			d, s := export(parts)
			clientCPU[parts] += cpuTime() - c0
			srvCPU[parts] += serverCPU(parts) - s0
			exports[parts] = append(exports[parts], d)
			size = s
		}
	}
	// The files of the last run read back with the right row count.
	var n int64
	for i := range partCounts[len(partCounts)-1] {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", i)))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		n += pf.NumRows()
		f.Close()
	}
	if n != int64(rows) {
		t.Fatalf("files hold %d rows", n)
	}
	bestBase, medBase := slices.Min(base), median(base)
	perRun := func(d time.Duration) time.Duration { return (d / time.Duration(runs)).Round(10 * time.Millisecond) }
	t.Logf("COPY binary → io.Discard, 1 connection: best %v, median %v (%d runs; CPU per run: server %v, client %v)",
		bestBase.Round(time.Millisecond), medBase.Round(time.Millisecond), runs, perRun(baseServer), perRun(baseClient))
	for _, parts := range partCounts {
		d := exports[parts]
		t.Logf("export → zstd Parquet files, %d parts: best %v, median %v (%.1f MB; CPU per run: server %v, client %v); ratio best/best %.3f, median/median %.3f",
			parts, slices.Min(d).Round(time.Millisecond), median(d).Round(time.Millisecond), float64(size)/1e6,
			perRun(srvCPU[parts]), perRun(clientCPU[parts]),
			float64(slices.Min(d))/float64(bestBase), float64(median(d))/float64(medBase))
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user+system CPU time of process pid (0 if it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}
