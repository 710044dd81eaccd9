package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/internal/bench"
)

func (a *app) benchCommand() *cobra.Command {
	o := bench.Options{}
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure task throughput and dependency latency; the last line is key=value pairs",
		Long: `bench measures the engine on DECKHAND_CATALOG's server (in scratch databases it drops
afterwards) or, when none is configured, on a throwaway cluster it starts itself:
  - throughput of noop tasks (anywhere and bound to a node) and of SELECT 1 SQL tasks;
  - with --river DIR, River's reference benchmark (bench/rivercmp) right before and right
    after deckhand's noop run, on the same server; deckhand's rate is compared with the mean;
  - the hand-off latency along a chain of dependent tasks (completion to dependent start);
  - pgbench -S -c 16 on the same server, the ceiling for SQL tasks;
  - when the server runs on this machine, what a SQL task costs in CPU, by process (the
    node's sessions, the catalog's, the server's other processes, deckhand), and what a
    pgbench transaction costs in the same run: where the time of a task goes;
  - the same throughputs with many finished tasks in the catalog, an idle claim there, and the
    submission of a chain and of a fan-out/fan-in of --submit tasks each;
  - with --workers W above 1, the work-only noop rate of one worker of concurrency
    W x --concurrency and of W workers of --concurrency each, on a fresh catalog per run, in
    the order 1, W, W, 1 (each figure the mean of its two runs); with River, River with W
    clients (sharing its 2,000 workers, a pool each) right before and after the W-worker runs;
  - with --nodes N above 1, --sql-tasks SELECT 1 tasks on one node of max_tasks W x
    --concurrency, then spread round-robin over N nodes of max_tasks
    max(1, W x --concurrency / N) each (as many slots in all, or more), every node the same
    scratch database, on a fresh catalog each, with the median and p99 of the workers' claim
    rounds.
The last line is key=value pairs; -o json prints the same figures as one JSON object (the
progress lines then go to stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.CatalogDSN = a.catalogDSN
			if o.Workers < 1 || o.Concurrency < 1 || o.Nodes < 0 {
				return Usage("--workers and --concurrency must be positive, --nodes not negative")
			}
			if err := checkBench(o); err != nil {
				return err
			}
			if o.RiverDir == "auto" {
				o.RiverDir = ""
				if _, err := os.Stat("bench/rivercmp/go.mod"); err == nil {
					o.RiverDir = "bench/rivercmp"
				} else {
					fmt.Fprintln(a.progress(), "river: skipped: no bench/rivercmp in the current directory (run from deckhand's source tree, or pass --river DIR)")
				}
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return Usage("--cpuprofile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return Usage("--cpuprofile: %v", err)
				}
				defer pprof.StopCPUProfile()
			}
			res, err := bench.Run(cmd.Context(), o, a.progress())
			if err != nil {
				return Failed("bench: %w", err)
			}
			return a.printSummary(res.Summary())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Tasks, "tasks", 50000, "noop tasks per throughput run")
	f.IntVar(&o.SQLTasks, "sql-tasks", 20000, "SELECT 1 tasks for the SQL throughput runs (0 skips)")
	f.IntVar(&o.Chain, "chain", 1000, "dependent tasks in the latency chain (0 skips)")
	f.IntVar(&o.Finished, "finished", 1000000, "finished tasks preloaded for the scale runs (0 skips them)")
	f.IntVar(&o.Submit, "submit", 100000, "tasks of each large job whose submission is timed, at scale unless --finished 0 (0 skips)")
	f.DurationVar(&o.Pgbench, "pgbench", 10*time.Second, "how long pgbench -S runs (0 skips)")
	f.IntVar(&o.Workers, "workers", 1, "workers (above 1: also measured against one worker of the same total concurrency)")
	f.IntVar(&o.Concurrency, "concurrency", 1000, "concurrency of each worker")
	f.IntVar(&o.NodeMax, "node-max-tasks", 16, "max_tasks of the node SQL tasks run on")
	f.IntVar(&o.Nodes, "nodes", 0, "above 1: SQL tasks spread over this many nodes of max_tasks max(1, workers x concurrency / nodes), against one node of max_tasks workers x concurrency")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write deckhand's CPU profile of the whole run to this file (go tool pprof)")
	cmd.AddCommand(a.benchExportCommand())
	cmd.AddCommand(a.benchCleanupCommand())
	cmd.AddCommand(a.benchMoveCommand())
	f.StringVar(&o.RiverDir, "river", "auto", "directory of the rivercmp module to run River on the same server (auto: ./bench/rivercmp if present; empty: skip)")
	return cmd
}

func (a *app) benchExportCommand() *cobra.Command {
	o := bench.ExportOptions{}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Compare a Parquet export of a partition with COPY (FORMAT binary) on the same server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := firstError(atLeast1("--rows", o.Rows), atLeast1("--parts", o.Parts), atLeast1("--workers", o.Workers)); err != nil {
				return err
			}
			o.CatalogDSN = a.catalogDSN
			res, err := bench.RunExport(cmd.Context(), o, a.progress())
			if err != nil {
				return Failed("bench export: %w", err)
			}
			return a.printSummary(res.Summary())
		},
	}
	cmd.Flags().IntVar(&o.Rows, "rows", 2000000, "rows in the partition")
	cmd.Flags().IntVar(&o.Parts, "parts", 4, "parallel parts")
	cmd.Flags().IntVar(&o.Workers, "workers", 1, "workers")
	return cmd
}

func (a *app) benchMoveCommand() *cobra.Command {
	o := bench.MoveOptions{}
	var size string
	cmd := &cobra.Command{
		Use:   "move",
		Short: "Compare an online schema move with pg_dump | psql, and time the writes blocked at its cut-over",
		Long: `bench move fills a schema of --size on DECKHAND_CATALOG's server (which needs
wal_level=logical), or on a throwaway cluster it starts itself, in scratch databases it drops
afterwards, then measures:
  - the MB/s of an online move of the schema (the move task kind, run by a worker) between two
    databases of the server, against pg_dump -n schema | psql into a fresh database of the same
    server, run before and after the move (their mean is the baseline), and the ratio;
  - the writes of a writer at --write-rate per second to the source during the move: the
    longest (the cut-over blocks writers) and the 99th percentile, beside --max-write-block.
It fails if the target does not hold exactly the source's rows at the cut-over (row counts and
md5 per table). The last line is key=value pairs; -o json prints the figures as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Size, err = parseSize(size); err != nil {
				return Usage("--size: %v", err)
			}
			if o.WriteRate <= 0 {
				return Usage("--write-rate must be positive")
			}
			if o.MaxWriteBlock <= 0 {
				return Usage("--max-write-block must be positive")
			}
			o.CatalogDSN = a.catalogDSN
			res, err := bench.RunMove(cmd.Context(), o, a.progress())
			if err != nil {
				return Failed("bench move: %w", err)
			}
			if a.json() {
				return PrintJSON(a.stdout, res)
			}
			fmt.Fprintln(a.stdout, res.Line())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&size, "size", "1GB", "size of the schema moved: its tables, indexes and TOAST (e.g. 256MB, 1GB)")
	f.IntVar(&o.WriteRate, "write-rate", 200, "writes per second to the source during the move")
	f.DurationVar(&o.MaxWriteBlock, "max-write-block", 2*time.Second, "longest the cut-over may block writers (the move's --max-write-block)")
	return cmd
}

// progress is where a benchmark writes its progress lines: stdout, or stderr when stdout
// carries JSON.
func (a *app) progress() io.Writer {
	if a.json() {
		return a.stderr
	}
	return a.stdout
}

// printSummary writes a benchmark's figures: its key=value line, or one JSON object.
func (a *app) printSummary(s bench.Summary) error {
	if a.json() {
		return PrintJSON(a.stdout, s)
	}
	_, err := fmt.Fprintln(a.stdout, s)
	return err
}
