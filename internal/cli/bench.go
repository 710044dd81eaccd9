package cli

import (
	"fmt"
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
  - the same throughputs with many finished tasks in the catalog, an idle claim there, and the
    submission of a chain and of a fan-out/fan-in of --submit tasks each.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.CatalogDSN = a.catalogDSN
			if o.RiverDir == "auto" {
				o.RiverDir = ""
				if _, err := os.Stat("bench/rivercmp/go.mod"); err == nil {
					o.RiverDir = "bench/rivercmp"
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
			res, err := bench.Run(cmd.Context(), o, a.stdout)
			if err != nil {
				return Failed("bench: %w", err)
			}
			fmt.Fprintln(a.stdout, res.Line())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Tasks, "tasks", 50000, "noop tasks per throughput run")
	f.IntVar(&o.SQLTasks, "sql-tasks", 20000, "SELECT 1 tasks for the SQL throughput runs (0 skips)")
	f.IntVar(&o.Chain, "chain", 1000, "dependent tasks in the latency chain (0 skips)")
	f.IntVar(&o.Finished, "finished", 1000000, "finished tasks preloaded for the scale runs (0 skips them)")
	f.IntVar(&o.Submit, "submit", 100000, "tasks of each large job whose submission is timed, at scale unless --finished 0 (0 skips)")
	f.DurationVar(&o.Pgbench, "pgbench", 10*time.Second, "how long pgbench -S runs (0 skips)")
	f.IntVar(&o.Workers, "workers", 1, "workers")
	f.IntVar(&o.Concurrency, "concurrency", 1000, "concurrency of each worker")
	f.IntVar(&o.NodeMax, "node-max-tasks", 16, "max_tasks of the node SQL tasks run on")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write deckhand's CPU profile of the whole run to this file (go tool pprof)")
	cmd.AddCommand(a.benchExportCommand())
	cmd.AddCommand(a.benchCleanupCommand())
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
			o.CatalogDSN = a.catalogDSN
			res, err := bench.RunExport(cmd.Context(), o, a.stdout)
			if err != nil {
				return Failed("bench export: %w", err)
			}
			fmt.Fprintln(a.stdout, res.Line())
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Rows, "rows", 2000000, "rows in the partition")
	cmd.Flags().IntVar(&o.Parts, "parts", 4, "parallel parts")
	cmd.Flags().IntVar(&o.Workers, "workers", 1, "workers")
	return cmd
}
