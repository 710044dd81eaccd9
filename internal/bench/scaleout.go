package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// The scale-out runs compare Options.Workers workers with one worker of the same total
// concurrency (and River with as many clients as workers with River with one), and SQL tasks
// spread over Options.Nodes nodes with the same tasks on one node. Each run has a fresh
// scratch catalog and workers of its own, so that none inherits what another left behind.

// Workers holds the figures of Options.Workers workers against one worker.
type Workers struct {
	OneTasksPerS             float64 // one worker of concurrency Workers×Concurrency, work only, mean of two runs
	TasksPerS                float64 // Workers workers of Concurrency each, work only, mean of two runs
	RiverClientsWorkJobsPerS float64 // River with Workers clients, work only, mean of two runs
}

// Nodes holds the figures of SQL tasks spread over Options.Nodes nodes against one node.
type Nodes struct {
	Nodes, MaxTasks      int     // nodes registered and the max_tasks of each
	AddS                 float64 // registering the nodes
	SubmitS              float64 // submitting the tasks (the client checks the owner on every node)
	TasksPerS            float64 // submission to all done, as the one-node SQL run
	WorkTasksPerS        float64 // submission's commit to all done
	OneNodeTasksPerS     float64 // the same tasks on one node of max_tasks Workers×Concurrency
	OneNodeWorkTasksPerS float64
	ClaimP99MS           float64 // the workers' claim rounds during the many-nodes run
	OneNodeClaimP99MS    float64
}

// workerRuns measures the work-only noop rate of one worker of concurrency W×C and of W
// workers of concurrency C, in the order 1, W, W, 1 so that neither is favoured by when it
// runs; each figure is the mean of its two runs. River with W clients runs right before the
// first W-worker run and right after the second, as River with one client brackets the main
// noop run.
func workerRuns(ctx context.Context, admin *pgx.Conn, server string, o Options, rv *river, out io.Writer) (*Workers, error) {
	total := o.Workers * o.Concurrency
	rates := map[int][]float64{}
	for i, n := range []int{1, o.Workers, o.Workers, 1} {
		if rv != nil && i == 1 {
			if err := rv.run(ctx, fmt.Sprintf("%d clients, before deckhand's first %d-worker run", o.Workers, o.Workers), o.Workers); err != nil {
				fmt.Fprintf(out, "river: %v\n", err)
			}
		}
		r, err := workOnly(ctx, admin, server, n, total/n, o.Tasks)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "workers: %d worker(s) x concurrency %d: %.0f noop tasks/s once submitted\n", n, total/n, r)
		rates[n] = append(rates[n], r)
		if rv != nil && i == 2 {
			if err := rv.run(ctx, fmt.Sprintf("%d clients, after deckhand's second %d-worker run", o.Workers, o.Workers), o.Workers); err != nil {
				fmt.Fprintf(out, "river: %v\n", err)
			}
		}
	}
	w := &Workers{OneTasksPerS: avg(rates[1]), TasksPerS: avg(rates[o.Workers])}
	fmt.Fprintf(out, "workers: %d workers %.0f tasks/s, one worker %.0f tasks/s (means of runs in the order 1, %d, %d, 1): %.2fx\n",
		o.Workers, w.TasksPerS, w.OneTasksPerS, o.Workers, o.Workers, ratio(w.TasksPerS, w.OneTasksPerS))
	if rv != nil && len(rv.kRuns) > 0 {
		w.RiverClientsWorkJobsPerS = mean(rv.kRuns)["river_work_jobs_per_s"]
		fmt.Fprintf(out, "workers: River with %d clients %.0f jobs/s once started, mean of %d runs: deckhand's %d workers are %.2fx\n",
			o.Workers, w.RiverClientsWorkJobsPerS, len(rv.kRuns), o.Workers, ratio(w.TasksPerS, w.RiverClientsWorkJobsPerS))
	}
	return w, nil
}

// workOnly is the rate of noop tasks from their submission's commit to the last one done, on
// a fresh catalog with workers of its own, after a warm-up job.
func workOnly(ctx context.Context, admin *pgx.Conn, server string, workers, concurrency, tasks int) (float64, error) {
	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return 0, err
	}
	defer dropCatalog()
	stop, err := startWorkersWith(ctx, dsn, workers, concurrency, &recorder{}, nil)
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := runJob(ctx, client, noopJob(min(2000, tasks), "")); err != nil {
		return 0, err
	}
	_, work, err := runJobSplit(ctx, client, noopJob(tasks, ""))
	if err != nil {
		return 0, err
	}
	return rate(tasks, work), nil
}

// nodesRuns runs Options.SQLTasks `SELECT 1` tasks on one node whose max_tasks is the
// workers' total concurrency, and spread round-robin over Options.Nodes nodes of max_tasks
// max(1, total concurrency / nodes) each: as many slots in all as the one node has (more
// when there are more nodes than that). Every node is the database nodeDSN names, so that
// the figures differ by the catalog's work alone. The runs go in the order one node, many,
// many, one node, so that neither is favoured by when it runs (the machine's speed drifts);
// each figure is the mean of its two runs. With a meter (nil when the server is elsewhere),
// each run also says what a task cost in CPU, by process.
func nodesRuns(ctx context.Context, admin *pgx.Conn, server, nodeDSN string, o Options, meter *cpuMeter, out io.Writer) (*Nodes, error) {
	total := o.Workers * o.Concurrency
	n := &Nodes{Nodes: o.Nodes, MaxTasks: max(1, total/o.Nodes)}
	one := []deckhandtype.Node{{Name: "bench-one", DSN: nodeDSN, MaxTasks: total}}
	many := make([]deckhandtype.Node, o.Nodes)
	for i := range many {
		many[i] = deckhandtype.Node{Name: fmt.Sprintf("bench-%04d", i), DSN: nodeDSN, MaxTasks: n.MaxTasks}
	}
	var ones, manys []sqlRun
	for _, nodes := range [][]deckhandtype.Node{one, many, many, one} {
		r, err := sqlOnNodes(ctx, admin, server, o, nodes, &sqlCPU{meter: meter, nodeDB: dbName(nodeDSN)}, out)
		if err != nil {
			return nil, err
		}
		if len(nodes) == 1 {
			ones = append(ones, r)
		} else {
			manys = append(manys, r)
		}
	}
	o1, m := meanRuns(ones), meanRuns(manys)
	n.OneNodeTasksPerS, n.OneNodeWorkTasksPerS, n.OneNodeClaimP99MS = o1.rate, o1.workRate, o1.claimP99MS
	n.TasksPerS, n.WorkTasksPerS, n.ClaimP99MS = m.rate, m.workRate, m.claimP99MS
	n.AddS, n.SubmitS = m.add.Seconds(), m.submit.Seconds()
	fmt.Fprintf(out, "nodes: %d nodes %.0f SQL tasks/s against one node's %.0f: %.2fx (once submitted %.0f against %.0f); claim p99 %.1f ms against %.1f ms (means of runs in the order 1, %d, %d, 1)\n",
		o.Nodes, n.TasksPerS, n.OneNodeTasksPerS, ratio(n.TasksPerS, n.OneNodeTasksPerS), n.WorkTasksPerS, n.OneNodeWorkTasksPerS,
		n.ClaimP99MS, n.OneNodeClaimP99MS, o.Nodes, o.Nodes)
	return n, nil
}

// meanRuns is the mean of each figure of runs.
func meanRuns(runs []sqlRun) sqlRun {
	var m sqlRun
	for _, r := range runs {
		m.rate += r.rate / float64(len(runs))
		m.workRate += r.workRate / float64(len(runs))
		m.claimP99MS += r.claimP99MS / float64(len(runs))
		m.submit += r.submit / time.Duration(len(runs))
		m.add += r.add / time.Duration(len(runs))
	}
	return m
}

// sqlRun is what one run of sqlOnNodes measured.
type sqlRun struct {
	rate       float64       // tasks/s, submission to all done
	workRate   float64       // tasks/s, submission's commit to all done
	submit     time.Duration // the submission, with its owner checks on every node
	claimP99MS float64
	add        time.Duration // registering the nodes
}

// sqlOnNodes registers nodes in a fresh catalog, starts Options.Workers workers there, warms
// them up (a task per slot, at most Options.SQLTasks, which opens the node's connections) and
// runs Options.SQLTasks SQL tasks over the nodes, round-robin, timing the claims and metering
// cpu (its catalogDB is this run's) meanwhile.
func sqlOnNodes(ctx context.Context, admin *pgx.Conn, server string, o Options, nodes []deckhandtype.Node, cpu *sqlCPU, out io.Writer) (sqlRun, error) {
	var r sqlRun
	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return r, err
	}
	defer dropCatalog()
	cpu.catalogDB = dbName(dsn)
	names := make([]string, len(nodes))
	began := time.Now()
	for i, n := range nodes {
		if err := client.AddNode(ctx, n); err != nil {
			return r, err
		}
		names[i] = n.Name
	}
	r.add = time.Since(began)
	h := newClaimHistogram()
	stop, err := startWorkersWith(ctx, dsn, o.Workers, o.Concurrency, &recorder{}, h.metrics)
	if err != nil {
		return r, err
	}
	defer stop()
	if _, err := runJob(ctx, client, sqlJob(min(o.SQLTasks, o.Workers*o.Concurrency), names...)); err != nil {
		return r, err
	}
	// The claims are counted from the submission's commit (nothing is claimable before) to the
	// job's end.
	vias := []string{"", "fetch", "complete"} // both, then each alone for the report
	before := make([]claimCounts, len(vias))
	var snapErr error
	var cost func(tasks int) *sqlCost
	d, work, err := runJobThen(ctx, client, sqlJob(o.SQLTasks, names...), func() {
		cost = cpu.start(ctx)
		for i, via := range vias {
			var err error
			before[i], err = h.snapshot(via)
			snapErr = errors.Join(snapErr, err)
		}
	})
	if err = errors.Join(err, snapErr); err != nil {
		return r, err
	}
	spent := cost(o.SQLTasks)
	p99 := make([]float64, len(vias))
	rounds := make([]uint64, len(vias))
	var p50 float64
	for i, via := range vias {
		after, err := h.snapshot(via)
		if err != nil {
			return r, err
		}
		c := after.since(before[i])
		p99[i], rounds[i] = c.quantileMS(0.99), c.total
		if via == "" {
			p50 = c.quantileMS(0.5)
		}
	}
	r.rate, r.workRate, r.submit = rate(o.SQLTasks, d), rate(o.SQLTasks, work), d-work
	r.claimP99MS = p99[0]
	fmt.Fprintf(out, "nodes: %d `SELECT 1` tasks over %d node(s) of max_tasks %d (registered in %s) in %s = %.0f tasks/s; submitted in %s, then %.0f tasks/s\n",
		o.SQLTasks, len(nodes), nodes[0].MaxTasks, r.add.Round(time.Millisecond), d.Round(time.Millisecond), r.rate,
		r.submit.Round(time.Millisecond), r.workRate)
	fmt.Fprintf(out, "nodes:   claim rounds p50 %.1f ms, p99 %.1f ms (%d rounds); p99 via fetch %.1f ms (%d), via complete %.1f ms (%d)\n",
		p50, p99[0], rounds[0], p99[1], rounds[1], p99[2], rounds[2])
	if spent != nil {
		fmt.Fprintf(out, "nodes:   %s\n", spent)
	}
	return r, nil
}

// connectionsNeeded is how many connections the server must accept for the --nodes runs: a
// session per slot of the workers' total concurrency (SQL tasks on the one node, or over the
// many), one per node while a job is submitted (the client checks the owner on each node
// through a connection of its own, all open until the check ends), the catalog pools of two
// sets of workers (16 each), the main SQL node's sessions and some to spare (clients, River).
func connectionsNeeded(o Options) int {
	return o.Workers*o.Concurrency + o.Nodes + 16*2*o.Workers + o.NodeMax + 100
}

// checkConnections warns when the server (one given rather than started) accepts fewer
// connections than the --nodes runs may open.
func checkConnections(ctx context.Context, admin *pgx.Conn, o Options, out io.Writer) error {
	var have int
	if err := admin.QueryRow(ctx, `SELECT setting::int FROM pg_catalog.pg_settings WHERE name = 'max_connections'`).Scan(&have); err != nil {
		return err
	}
	if need := connectionsNeeded(o); have < need {
		fmt.Fprintf(out, "nodes: warning: max_connections is %d; SQL tasks at the total concurrency may need about %d\n", have, need)
	}
	return nil
}

func avg(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}
