package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
)

// ExportOptions choose the export benchmark's size and parallelism.
type ExportOptions struct {
	CatalogDSN string // server to use; empty starts a throwaway cluster
	Rows       int
	Parts      int // parallel parts (the node's max_tasks and the workers' concurrency)
	Workers    int
}

// ExportResult holds the figures of the export benchmark.
type ExportResult struct {
	CopySeconds   float64
	ExportSeconds float64
	Rows          int64
	HeapBytes     int64
	ParquetBytes  int64
}

// Summary is the run's figures, as the last line gives them.
func (r *ExportResult) Summary() Summary {
	var s Summary
	s.add("export_s", r.ExportSeconds, 3)
	s.add("copy_s", r.CopySeconds, 3)
	s.add("ratio", r.ExportSeconds/r.CopySeconds, 3)
	s.add("rows_per_s", float64(r.Rows)/r.ExportSeconds, 0)
	s.add("heap_mb", float64(r.HeapBytes)/(1<<20), 0)
	s.add("parquet_mb", float64(r.ParquetBytes)/(1<<20), 1)
	return s
}

// RunExport measures, on one server in one run, COPY ... TO STDOUT (FORMAT binary) of a
// partition into nothing, and a deckhand export of the same partition as zstd Parquet to a
// local directory with parallel parts (submission to commit).
func RunExport(ctx context.Context, o ExportOptions, out io.Writer) (*ExportResult, error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	server, stopServer, err := startServer(ctx, o.CatalogDSN, out)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background()) //nolint:errcheck
	nodeDB, dropNode, err := scratchDB(ctx, admin, "deckhand_bench_export")
	if err != nil {
		return nil, err
	}
	defer dropNode()
	node, err := pgx.Connect(ctx, withDB(server, nodeDB))
	if err != nil {
		return nil, err
	}
	defer node.Close(context.Background()) //nolint:errcheck

	fmt.Fprintf(out, "export: creating a partition of %d rows (bigint, timestamptz, int, text, jsonb, numeric)...\n", o.Rows)
	if err := parquetcopy.BenchTable(ctx, node.PgConn(), "bench_events", o.Rows); err != nil {
		return nil, err
	}
	res := &ExportResult{}
	if err := node.QueryRow(ctx, `SELECT count(*), pg_relation_size('bench_events') FROM bench_events`).Scan(&res.Rows, &res.HeapBytes); err != nil {
		return nil, err
	}

	// The reference: one COPY in binary format, read and thrown away.
	began := time.Now()
	if _, err := node.PgConn().CopyTo(ctx, io.Discard, `COPY bench_events TO STDOUT (FORMAT binary)`); err != nil {
		return nil, err
	}
	res.CopySeconds = time.Since(began).Seconds()
	fmt.Fprintf(out, "export: COPY (FORMAT binary) of %d rows, %.0f MB of heap, to /dev/null: %.3fs\n",
		res.Rows, float64(res.HeapBytes)/(1<<20), res.CopySeconds)

	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return nil, err
	}
	defer dropCatalog()
	if err := client.AddNode(ctx, deckhandtype.Node{Name: "primary", DSN: withDB(server, nodeDB), Group: "bench", MaxTasks: o.Parts}); err != nil {
		return nil, err
	}
	stop, err := startWorkers(ctx, dsn, Options{Workers: o.Workers, Concurrency: o.Parts + 1}, &recorder{})
	if err != nil {
		return nil, err
	}
	defer stop()
	dir, err := os.MkdirTemp("", "deckhand-bench-export-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	partSize := max(res.HeapBytes/int64(o.Parts)+8192, 8192)
	began = time.Now()
	// Schema-qualified: what a name means must not depend on any session's search_path.
	e, err := export.Start(ctx, client, export.Request{Table: "public.bench_events", Group: "bench", To: "file://" + dir, PartSize: partSize})
	if err != nil {
		return nil, err
	}
	job, err := client.Wait(ctx, e.JobID, nil)
	if err != nil {
		return nil, err
	}
	res.ExportSeconds = time.Since(began).Seconds()
	if job.State != deckhandtype.JobFinished {
		d, _ := client.Job(ctx, e.JobID)
		var errs []string
		for _, t := range d.Tasks {
			if t.LastError != nil {
				errs = append(errs, t.Name+": "+t.LastError.String())
			}
		}
		return nil, fmt.Errorf("export job %s: %s", job.State, strings.Join(errs, "; "))
	}
	done, err := client.Export(ctx, e.ID)
	if err != nil {
		return nil, err
	}
	if done.Rows != res.Rows {
		return nil, fmt.Errorf("export wrote %d rows, the table has %d", done.Rows, res.Rows)
	}
	res.ParquetBytes = done.Bytes
	fmt.Fprintf(out, "export: zstd Parquet in %d parallel parts, submission to manifest: %.3fs (%.2fx COPY), %.0f MB written\n",
		done.PartsTotal, res.ExportSeconds, res.ExportSeconds/res.CopySeconds, float64(done.Bytes)/(1<<20))
	return res, nil
}
