package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/move"
)

// MoveOptions choose the online move benchmark's size and load.
type MoveOptions struct {
	CatalogDSN    string // server to use (wal_level=logical); empty starts a throwaway cluster
	Size          int64  // bytes of the schema moved (pg_total_relation_size of its tables)
	WriteRate     int    // writes per second to the source while the move runs
	MaxWriteBlock time.Duration
}

// MoveResult holds the figures of the online move benchmark.
type MoveResult struct {
	SchemaBytes    int64             `json:"schema_bytes"`
	Rows           int64             `json:"rows"`
	MoveSeconds    float64           `json:"move_s"`
	MoveMBPerS     float64           `json:"move_mb_per_s"`
	DumpSeconds    []float64         `json:"pg_dump_psql_s"` // before and after the move
	DumpMBPerS     float64           `json:"pg_dump_psql_mb_per_s"`
	Ratio          float64           `json:"ratio"` // move MB/s over pg_dump | psql MB/s
	WriteRate      int               `json:"write_rate"`
	WritesPerS     float64           `json:"writes_per_s"`     // the rate the writer kept up
	Writes         int               `json:"writes"`           // committed during the move
	LongestWriteMS float64           `json:"longest_write_ms"` // the writer's own measure, round trip included
	P99WriteMS     float64           `json:"p99_write_ms"`
	MoveBlockMS    int               `json:"move_reported_block_ms"` // as the move reports its cut-over
	BudgetMS       float64           `json:"max_write_block_ms"`
	WithinBudget   bool              `json:"within_budget"`
	Checksums      map[string]string `json:"checksums"` // per table, equal on source and target
	ServerVersion  string            `json:"server_version"`
}

// Line is the machine-readable summary.
func (r *MoveResult) Line() string {
	return fmt.Sprintf("schema_mb=%.1f move_s=%.2f move_mb_per_s=%.2f pg_dump_psql_mb_per_s=%.2f move_ratio=%.2f "+
		"write_rate=%d writes_per_s=%.0f writes=%d longest_write_ms=%.1f p99_write_ms=%.1f move_block_ms=%d max_write_block_ms=%.0f checksums_match=true",
		mb(r.SchemaBytes), r.MoveSeconds, r.MoveMBPerS, r.DumpMBPerS, r.Ratio,
		r.WriteRate, r.WritesPerS, r.Writes, r.LongestWriteMS, r.P99WriteMS, r.MoveBlockMS, r.BudgetMS)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// logicalSettings let a throwaway cluster run moves.
var logicalSettings = map[string]string{
	"wal_level": "logical", "max_replication_slots": "16", "max_wal_senders": "16",
	"max_logical_replication_workers": "8", "max_worker_processes": "16",
	"wal_sender_timeout": "10s", "wal_receiver_status_interval": "1s",
}

const (
	moveSchema = "bench_move"
	srcGroup   = "bench_g1"
	dstGroup   = "bench_g2"
)

// RunMove measures an online move of a schema of o.Size between two databases of one server
// under a steady writer, against pg_dump -n schema | psql of the same schema on the same server
// (once before and once after the move; their mean is the baseline), and checks that the
// target holds what the source held at the cut-over.
func RunMove(ctx context.Context, o MoveOptions, out io.Writer) (*MoveResult, error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if o.MaxWriteBlock <= 0 {
		o.MaxWriteBlock = move.DefaultMaxWriteBlock
	}
	if o.WriteRate <= 0 {
		o.WriteRate = 200
	}
	server, stopServer, err := startServer(ctx, o.CatalogDSN, out, logicalSettings)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.Background()) //nolint:errcheck
	res := &MoveResult{WriteRate: o.WriteRate, BudgetMS: ms(o.MaxWriteBlock)}
	var walLevel string
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('wal_level')`).
		Scan(&res.ServerVersion, &walLevel); err != nil {
		return nil, err
	}
	if walLevel != "logical" {
		return nil, fmt.Errorf("the server has wal_level=%s; a move needs wal_level=logical", walLevel)
	}
	catalogDSN, client, dropCatalog, err := scratchCatalog(ctx, admin, server, move.Feature())
	if err != nil {
		return nil, err
	}
	defer dropCatalog()
	var dbs [4]string // source, target, and the baseline's two targets
	for i, prefix := range []string{"deckhand_bench_move_src", "deckhand_bench_move_dst", "deckhand_bench_dump1", "deckhand_bench_dump2"} {
		db, dropDB, err := scratchDB(ctx, admin, prefix)
		if err != nil {
			return nil, err
		}
		defer dropDB()
		// A move that failed may leave a replication slot in the database, which would keep
		// it from being dropped: those go first.
		defer admin.Exec(context.Background(), `SELECT pg_catalog.pg_drop_replication_slot(slot_name)
			FROM pg_catalog.pg_replication_slots WHERE database = $1 AND NOT active`, db) //nolint:errcheck
		dbs[i] = db
	}
	srcDSN, dstDSN := withDB(server, dbs[0]), withDB(server, dbs[1])
	for _, n := range []deckhandtype.Node{
		{Name: "bench_src", DSN: srcDSN, Group: srcGroup, MaxTasks: 4},
		{Name: "bench_dst", DSN: dstDSN, Group: dstGroup, MaxTasks: 4},
	} {
		if err := client.AddNode(ctx, n); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "server: PostgreSQL %s; filling schema %s with %.0f MB...\n", res.ServerVersion, moveSchema, mb(o.Size))
	src, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background()) //nolint:errcheck
	if res.SchemaBytes, res.Rows, err = fillSchema(ctx, src, o.Size); err != nil {
		return nil, fmt.Errorf("fill the source: %w", err)
	}
	fmt.Fprintf(out, "source: %.1f MB in %d rows (tables and indexes)\n", mb(res.SchemaBytes), res.Rows)

	// The baseline before the move, from the source.
	d, err := dumpRestore(ctx, srcDSN, withDB(server, dbs[2]))
	if err != nil {
		return nil, err
	}
	res.DumpSeconds = append(res.DumpSeconds, d.Seconds())
	fmt.Fprintf(out, "pg_dump -n %s | psql (before the move): %s = %.1f MB/s\n", moveSchema, d.Round(time.Millisecond), mb(res.SchemaBytes)/d.Seconds())

	if err := timeMove(ctx, catalogDSN, client, srcDSN, dstDSN, o, res, out); err != nil {
		return nil, err
	}

	// The baseline after the move, from the target (the same rows, and the writer's).
	if d, err = dumpRestore(ctx, dstDSN, withDB(server, dbs[3])); err != nil {
		return nil, err
	}
	res.DumpSeconds = append(res.DumpSeconds, d.Seconds())
	fmt.Fprintf(out, "pg_dump -n %s | psql (after the move):  %s = %.1f MB/s\n", moveSchema, d.Round(time.Millisecond), mb(res.SchemaBytes)/d.Seconds())
	res.DumpMBPerS = mb(res.SchemaBytes) / ((res.DumpSeconds[0] + res.DumpSeconds[1]) / 2)
	res.Ratio = ratio(res.MoveMBPerS, res.DumpMBPerS)
	fmt.Fprintf(out, "move: %.1f MB/s, pg_dump | psql: %.1f MB/s (mean of both runs): the move is %.2fx\n", res.MoveMBPerS, res.DumpMBPerS, res.Ratio)
	fmt.Fprintf(out, "writes: %d committed during the move at %.0f/s (asked %d/s); longest %.1f ms, p99 %.1f ms; the move reports its cut-over blocked writes %d ms (budget %.0f ms)\n",
		res.Writes, res.WritesPerS, res.WriteRate, res.LongestWriteMS, res.P99WriteMS, res.MoveBlockMS, res.BudgetMS)
	return res, nil
}

// timeMove runs the move with a worker of its own and the writer on the source, and checks
// the target against the source, which stays (frozen) while a reader holds it.
func timeMove(ctx context.Context, catalogDSN string, client *engine.Client, srcDSN, dstDSN string, o MoveOptions, res *MoveResult, out io.Writer) error {
	cat, err := catalog.Open(ctx, catalogDSN)
	if err != nil {
		return err
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{Name: "bench-move", Concurrency: 4, Features: []engine.Feature{move.Feature()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	go func() { defer close(workerDone); w.Run(wctx) }() //nolint:errcheck
	defer func() { stopWorker(); <-workerDone }()

	// A reader keeps the source from being dropped after the cut-over, for the comparison.
	reader, err := pgx.Connect(ctx, srcDSN)
	if err != nil {
		return err
	}
	defer reader.Close(context.Background()) //nolint:errcheck
	if _, err := reader.Exec(ctx, `BEGIN; SELECT count(*) FROM `+moveSchema+`.customers`); err != nil {
		return err
	}
	wr, err := startWriter(ctx, srcDSN, o.WriteRate)
	if err != nil {
		return err
	}
	defer wr.stop()

	task, err := move.Request{Schema: moveSchema, From: srcGroup, To: dstGroup, MaxWriteBlock: o.MaxWriteBlock, Bytes: res.SchemaBytes}.Task("move")
	if err != nil {
		return err
	}
	task.MaxAttempts = 1
	fmt.Fprintf(out, "move: %s from %s to %s with %d writes/s to the source...\n", moveSchema, srcGroup, dstGroup, o.WriteRate)
	start := time.Now()
	id, err := client.Submit(ctx, jobOfTask(task))
	if err != nil {
		return err
	}
	job, err := client.Wait(ctx, id, nil)
	if err != nil {
		return err
	}
	took := time.Since(start)
	detail, err := client.Job(ctx, id)
	if err != nil {
		return err
	}
	if job.State != deckhandtype.JobFinished {
		msg := ""
		if len(detail.Tasks) > 0 && detail.Tasks[0].LastError != nil {
			msg = detail.Tasks[0].LastError.Message
		}
		return fmt.Errorf("the move ended %s: %s", job.State, msg)
	}
	res.MoveSeconds = took.Seconds()
	res.MoveMBPerS = mb(res.SchemaBytes) / took.Seconds()
	fmt.Fprintf(out, "move: %s = %.1f MB/s\n", took.Round(time.Millisecond), res.MoveMBPerS)
	if err := wr.finish(10 * time.Second); err != nil {
		return err
	}
	lat := wr.latencies()
	res.Writes, res.WritesPerS = wr.committedCount(), wr.achievedRate()
	if res.Writes == 0 {
		return fmt.Errorf("the writer committed nothing during the move")
	}
	res.LongestWriteMS, res.P99WriteMS = lat[len(lat)-1], percentile(lat, 0.99)
	if len(detail.Tasks) > 0 {
		if p, ok, err := cat.MoveProgress(ctx, detail.Tasks[0].ID); err != nil {
			return err
		} else if ok && p.LongestWriteBlockMS != nil {
			res.MoveBlockMS = *p.LongestWriteBlockMS
		}
	}
	res.WithinBudget = float64(res.MoveBlockMS) <= res.BudgetMS

	srcSums, err := checksums(ctx, srcDSN)
	if err != nil {
		return fmt.Errorf("checksums of the source: %w", err)
	}
	dstSums, err := checksums(ctx, dstDSN)
	if err != nil {
		return fmt.Errorf("checksums of the target: %w", err)
	}
	for table, sum := range srcSums {
		if dstSums[table] != sum {
			return fmt.Errorf("the moved data differs from the source's at the cut-over: %s: source %s, target %s", table, sum, dstSums[table])
		}
	}
	if len(dstSums) != len(srcSums) {
		return fmt.Errorf("the target has %d tables, the source %d", len(dstSums), len(srcSums))
	}
	if n := wr.committedOnTarget(ctx, dstDSN); n != nil {
		return n
	}
	res.Checksums = srcSums
	fmt.Fprintf(out, "checksums: the %d tables of the target equal the source's at the cut-over (rows and md5)\n", len(srcSums))
	_, err = reader.Exec(ctx, `COMMIT`)
	return err
}
