// Package bench measures deckhand's engine: noop, node-bound and SQL task throughput, the
// dependency hand-off along a chain, the same with a million finished tasks in the catalog,
// idle claims and the submission of 100,000-task jobs — beside River's reference benchmark
// (bench/rivercmp) and pgbench on the same server, in the same run.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
)

// Options choose what to measure.
type Options struct {
	CatalogDSN  string // server to use; empty starts a throwaway cluster
	Tasks       int    // noop and node-bound throughput runs
	SQLTasks    int
	Chain       int // links in the dependency chain
	Finished    int // finished tasks preloaded for the scale runs (0 skips them)
	Submit      int // tasks of the large jobs whose submission is timed at scale (0 skips it)
	Pgbench     time.Duration
	Workers     int // worker processes (in-process here); above 1, also measured against one worker
	Concurrency int // per worker
	NodeMax     int // max_tasks of the SQL node
	Nodes       int // above 1: SQL tasks spread over this many nodes, measured against one node
	RiverDir    string
}

// Result holds the figures, printed as key=value on the last line.
type Result struct {
	TasksPerS      float64 // noop, submission to all done
	WorkTasksPerS  float64 // noop, submitted to all done
	NodeTasksPerS  float64
	SQLTasksPerS   float64
	SQLCost        *sqlCost // nil when the server is not on this machine
	PgbenchTPS     float64
	PgbenchCPUUS   float64 // CPU per pgbench transaction, server and pgbench (0: not measured)
	ChainP50MS     float64
	ChainP99MS     float64
	Scale          *Scale
	Workers        *Workers           // with Options.Workers > 1
	Nodes          *Nodes             // with Options.Nodes > 1
	SubmitS        map[string]float64 // seconds to submit each shape of Options.Submit tasks
	River          map[string]float64 // rivercmp's figures, averaged over its runs
	ServerVersion  string
	RiverRuns      int
	riverWorkRatio float64
}

// Run performs every measurement and writes a report to out.
func Run(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var settings []map[string]string
	if o.Nodes > 1 && o.CatalogDSN == "" && connectionsNeeded(o) > 300 {
		fmt.Fprintf(out, "nodes: the throwaway cluster gets max_connections %d for SQL tasks at the total concurrency\n", connectionsNeeded(o))
		settings = append(settings, map[string]string{"max_connections": strconv.Itoa(connectionsNeeded(o))})
	}
	server, stopServer, err := startServer(ctx, o.CatalogDSN, out, settings...)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.Background()) //nolint:errcheck
	res := &Result{}
	if err := admin.QueryRow(ctx, `SHOW server_version`).Scan(&res.ServerVersion); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "server: PostgreSQL %s; %d worker(s) x concurrency %d\n", res.ServerVersion, o.Workers, o.Concurrency)

	var rv *river
	if o.RiverDir != "" {
		riverDB, dropRiver, err := scratchDB(ctx, admin, "deckhand_bench_river")
		if err != nil {
			return nil, err
		}
		defer dropRiver()
		if rv, err = buildRiver(ctx, o.RiverDir, withDB(server, riverDB), o.Tasks, o.Chain, out); err != nil {
			fmt.Fprintf(out, "river: skipped: %v\n", err)
		} else {
			defer rv.cleanup()
		}
	}
	// River first, then deckhand's noop run, then River again: both see the server as it is
	// at the time, and their mean is what deckhand is compared with.
	riverRun := func(when string) {
		if rv != nil {
			if err := rv.run(ctx, when, 1); err != nil {
				fmt.Fprintf(out, "river: %v\n", err)
			}
		}
	}
	riverRun("before deckhand's noop run")

	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return nil, err
	}
	defer dropCatalog()
	// The SQL node is another scratch database on the same server.
	nodeDB, dropNode, err := scratchDB(ctx, admin, "deckhand_bench_node")
	if err != nil {
		return nil, err
	}
	defer dropNode()
	cpu := &sqlCPU{meter: newCPUMeter(ctx, admin), catalogDB: dbName(dsn), nodeDB: nodeDB}
	for _, n := range []deckhandtype.Node{
		{Name: sqlNode, DSN: withDB(server, nodeDB), MaxTasks: o.NodeMax},
		{Name: wideNode, DSN: withDB(server, nodeDB), MaxTasks: o.Concurrency * o.Workers},
	} {
		if err := client.AddNode(ctx, n); err != nil {
			return nil, err
		}
	}
	rec := &recorder{}
	stop, err := startWorkers(ctx, dsn, o, rec)
	if err != nil {
		return nil, err
	}
	defer stop()

	// Warm up connections and caches so the first run is not penalised.
	if _, err := runJob(ctx, client, noopJob(2000, "")); err != nil {
		return nil, err
	}
	d, work, err := runJobSplit(ctx, client, noopJob(o.Tasks, ""))
	if err != nil {
		return nil, err
	}
	res.TasksPerS, res.WorkTasksPerS = rate(o.Tasks, d), rate(o.Tasks, work)
	fmt.Fprintf(out, "noop:  %d tasks in %s = %.0f tasks/s (submission to all done); %.0f tasks/s once submitted\n",
		o.Tasks, d.Round(time.Millisecond), res.TasksPerS, res.WorkTasksPerS)
	riverRun("after deckhand's noop run")
	if rv != nil && len(rv.runs) > 0 {
		res.River, res.RiverRuns = mean(rv.runs), len(rv.runs)
		if r := res.River["river_work_jobs_per_s"]; r > 0 {
			res.riverWorkRatio = res.WorkTasksPerS / r
			fmt.Fprintf(out, "river: %.0f jobs/s once started, mean of %d runs: deckhand's %.0f tasks/s is %.2fx\n",
				r, len(rv.runs), res.WorkTasksPerS, res.riverWorkRatio)
		}
	}

	if o.Chain > 0 {
		p50, p99, err := chainLatency(ctx, client, o.Chain, rec)
		if err != nil {
			return nil, err
		}
		res.ChainP50MS, res.ChainP99MS = p50, p99
		fmt.Fprintf(out, "chain: %d dependent tasks; completion-to-dependent-start p50 %.2f ms, p99 %.2f ms\n", o.Chain, p50, p99)
	}
	if res.NodeTasksPerS, res.SQLTasksPerS, res.SQLCost, err = nodeRuns(ctx, client, o, out, "", cpu); err != nil {
		return nil, err
	}
	if o.Workers > 1 {
		if res.Workers, err = workerRuns(ctx, admin, server, o, rv, out); err != nil {
			return nil, err
		}
	}
	if o.Nodes > 1 && o.SQLTasks > 0 {
		if err := checkConnections(ctx, admin, o, out); err != nil {
			return nil, err
		}
		if res.Nodes, err = nodesRuns(ctx, admin, server, withDB(server, nodeDB), o, cpu.meter, out); err != nil {
			return nil, err
		}
	}
	if o.Pgbench > 0 {
		pgbenchDB, dropPgbench, err := scratchDB(ctx, admin, "deckhand_bench_pgbench")
		if err != nil {
			return nil, err
		}
		res.PgbenchTPS, res.PgbenchCPUUS, err = pgbenchSelect(ctx, withDB(server, pgbenchDB), o.Pgbench, cpu.meter)
		dropPgbench()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "pgbench -S -c 16: %.0f transactions/s on the same server\n", res.PgbenchTPS)
		if res.PgbenchCPUUS > 0 {
			fmt.Fprintf(out, "pgbench -S -c 16: %.0f µs of CPU per transaction, the server's and pgbench's\n", res.PgbenchCPUUS)
		}
	}
	if o.Finished > 0 {
		if res.Scale, err = scale(ctx, admin, server, withDB(server, nodeDB), client, res.SQLTasksPerS, o, out, cpu); err != nil {
			return nil, err
		}
		res.printScale(out)
	}
	// Large submissions last: at scale, or on the catalog of the runs above with --finished 0.
	if o.Submit > 0 {
		if res.SubmitS, err = submissions(ctx, client, o.Submit, out); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// nodeRuns measures node-bound noop tasks and SQL tasks, and what the SQL tasks cost in CPU
// when cpu can tell.
func nodeRuns(ctx context.Context, client *engine.Client, o Options, out io.Writer, label string, cpu *sqlCPU) (
	node, sql float64, cost *sqlCost, err error) {
	d, err := runJob(ctx, client, noopJob(o.Tasks, wideNode))
	if err != nil {
		return 0, 0, nil, err
	}
	node = rate(o.Tasks, d)
	fmt.Fprintf(out, "%snode:  %d noop tasks bound to one node in %s = %.0f tasks/s\n", label, o.Tasks, d.Round(time.Millisecond), node)
	if o.SQLTasks > 0 {
		measure := cpu.start(ctx)
		d, err = runJob(ctx, client, sqlJob(o.SQLTasks, sqlNode))
		if err != nil {
			return 0, 0, nil, err
		}
		sql = rate(o.SQLTasks, d)
		fmt.Fprintf(out, "%ssql:   %d `SELECT 1` tasks on one node (max_tasks %d) in %s = %.0f tasks/s\n",
			label, o.SQLTasks, o.NodeMax, d.Round(time.Millisecond), sql)
		if cost = measure(o.SQLTasks); cost != nil {
			fmt.Fprintf(out, "%ssql:   %s\n", label, cost)
		}
	}
	return node, sql, cost, nil
}

// submissions times the submission of a chain and of a fan-out/fan-in of n tasks each.
func submissions(ctx context.Context, client *engine.Client, n int, out io.Writer) (map[string]float64, error) {
	jobs := bigJobs(n)
	took := map[string]float64{}
	for _, shape := range keys(jobs) {
		d, err := timeSubmission(ctx, client, jobs[shape])
		if err != nil {
			return nil, err
		}
		took[shape] = d.Seconds()
		fmt.Fprintf(out, "submit: a %s of %d tasks took %.2f s\n", shape, n, d.Seconds())
	}
	return took, nil
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Summary is the run's figures, as the last line gives them.
func (r *Result) Summary() Summary {
	var s Summary
	s.add("tasks_per_s", r.TasksPerS, 0)
	s.add("work_tasks_per_s", r.WorkTasksPerS, 0)
	s.add("node_tasks_per_s", r.NodeTasksPerS, 0)
	s.add("sql_tasks_per_s", r.SQLTasksPerS, 0)
	if c := r.SQLCost; c != nil {
		s.add("sql_cpu_us_per_task", c.TotalUS, 0)
		s.add("sql_node_cpu_us", c.NodeUS, 0)
		s.add("sql_catalog_cpu_us", c.CatalogUS, 0)
		s.add("sql_deckhand_cpu_us", c.BenchUS, 0)
	}
	s.add("pgbench_select_tps", r.PgbenchTPS, 0)
	if r.PgbenchCPUUS > 0 {
		s.add("pgbench_cpu_us_per_txn", r.PgbenchCPUUS, 0)
	}
	s.add("chain_p50_ms", r.ChainP50MS, 2)
	s.add("chain_p99_ms", r.ChainP99MS, 2)
	if sc := r.Scale; sc != nil {
		s.add("scale_tasks_per_s", sc.TasksPerS, 0)
		s.add("scale_ratio", ratio(sc.TasksPerS, r.TasksPerS), 2)
		s.add("scale_node_ratio", ratio(sc.NodeTasksPerS, r.NodeTasksPerS), 2)
		s.add("scale_sql_tasks_per_s", sc.SQLTasksPerS, 0)
		s.add("scale_sql_empty_tasks_per_s", sc.EmptySQLTasksPerS, 0)
		s.add("scale_sql_ratio", sc.sqlRatio(), 2)
		s.add("idle_claim_ms", sc.IdleClaimMS, 2)
	}
	if len(r.SubmitS) > 0 {
		slowest := 0.0
		for _, v := range r.SubmitS {
			slowest = max(slowest, v)
		}
		s.add("submit_100k_s", slowest, 2) // the slower shape
	}
	for _, k := range keys(r.River) {
		s.add(k, r.River[k], 2)
	}
	if r.riverWorkRatio > 0 {
		s.add("river_ratio", r.riverWorkRatio, 2)
	}
	if w := r.Workers; w != nil {
		s.add("one_worker_tasks_per_s", w.OneTasksPerS, 0)
		s.add("workers_tasks_per_s", w.TasksPerS, 0)
		s.add("scale_workers_ratio", ratio(w.TasksPerS, w.OneTasksPerS), 2)
		if w.RiverClientsWorkJobsPerS > 0 {
			s.add("river_clients_work_jobs_per_s", w.RiverClientsWorkJobsPerS, 2)
			s.add("workers_river_ratio", ratio(w.TasksPerS, w.RiverClientsWorkJobsPerS), 2)
		}
	}
	if n := r.Nodes; n != nil {
		s.add("one_node_sql_tasks_per_s", n.OneNodeTasksPerS, 0)
		s.add("many_nodes_tasks_per_s", n.TasksPerS, 0)
		s.add("many_nodes_ratio", ratio(n.TasksPerS, n.OneNodeTasksPerS), 2)
		s.add("one_node_sql_work_tasks_per_s", n.OneNodeWorkTasksPerS, 0)
		s.add("many_nodes_work_tasks_per_s", n.WorkTasksPerS, 0)
		s.add("many_nodes_submit_s", n.SubmitS, 2)
		s.add("many_nodes_claim_p99_ms", n.ClaimP99MS, 1)
		s.add("one_node_claim_p99_ms", n.OneNodeClaimP99MS, 1)
	}
	return s
}
