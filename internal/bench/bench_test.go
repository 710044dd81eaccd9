package bench

import (
	"context"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The server may be given as a URL: the scratch catalog, node and export databases are named
// through it (a keyword appended to a URL would make it unreadable).
func TestBenchOnURLServer(t *testing.T) {
	cl := pgtest.Shared(t)
	server := cl.URL("postgres", pgcluster.Superuser)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	res, err := Run(ctx, Options{CatalogDSN: server, Tasks: 50, SQLTasks: 10, Chain: 3, Finished: 1000, Submit: 100,
		Pgbench: time.Second, Workers: 1, Concurrency: 8, NodeMax: 4}, io.Discard)
	if err != nil {
		t.Fatalf("bench on %s: %v", server, err)
	}
	if res.TasksPerS <= 0 || res.NodeTasksPerS <= 0 || res.SQLTasksPerS <= 0 || res.ChainP50MS <= 0 || res.PgbenchTPS <= 0 {
		t.Errorf("bench measured nothing: %+v", res)
	}
	if s := res.Scale; s == nil || s.TasksPerS <= 0 || s.SQLTasksPerS <= 0 || s.EmptySQLTasksPerS <= 0 || s.IdleClaimMS <= 0 || len(res.SubmitS) != 2 {
		t.Errorf("bench measured nothing at scale: %+v", s)
	}
	// The harness's server runs on this machine: the SQL tasks' and pgbench's CPU is read.
	if res.SQLCost == nil || res.SQLCost.TotalUS <= 0 || res.PgbenchCPUUS <= 0 {
		t.Errorf("bench read no CPU cost from a server on this machine: SQL tasks %+v, pgbench %v µs", res.SQLCost, res.PgbenchCPUUS)
	}
	for _, key := range []string{"pgbench_select_tps=", "scale_sql_ratio=", "scale_sql_empty_tasks_per_s=", "idle_claim_ms=", "submit_100k_s=", "sql_cpu_us_per_task=",
		"sql_node_cpu_us=", "sql_catalog_cpu_us=", "sql_deckhand_cpu_us=", "pgbench_cpu_us_per_txn="} {
		if !strings.Contains(res.Summary().String(), key) {
			t.Errorf("the last line lacks %s: %s", key, res.Summary().String())
		}
	}

	eres, err := RunExport(ctx, ExportOptions{CatalogDSN: server, Rows: 2000, Parts: 2, Workers: 1}, io.Discard)
	if err != nil {
		t.Fatalf("bench export on %s: %v", server, err)
	}
	if eres.Rows != 2000 || eres.ParquetBytes <= 0 {
		t.Errorf("bench export: %+v, want 2000 rows exported", eres)
	}
}

// --workers 2 --nodes 5 measures one worker against two and SQL tasks on one node against
// five, and puts the figures on the last line.
func TestBenchScaleOut(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var out strings.Builder
	res, err := Run(ctx, Options{CatalogDSN: cl.DSN("postgres", pgcluster.Superuser), Tasks: 50, SQLTasks: 20,
		Workers: 2, Concurrency: 4, NodeMax: 4, Nodes: 5}, &out)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	fields := map[string]string{}
	for _, f := range strings.Fields(res.Summary().String()) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	for _, key := range []string{"one_worker_tasks_per_s", "workers_tasks_per_s", "scale_workers_ratio",
		"one_node_sql_tasks_per_s", "many_nodes_tasks_per_s", "many_nodes_ratio", "many_nodes_claim_p99_ms"} {
		v, err := strconv.ParseFloat(fields[key], 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s=%q, want a positive figure; line: %s", key, fields[key], res.Summary().String())
		}
	}
	if _, ok := fields["workers_river_ratio"]; ok {
		t.Errorf("River was skipped, yet the line has workers_river_ratio: %s", res.Summary().String())
	}
	if n := res.Nodes; n == nil || n.Nodes != 5 || n.MaxTasks != 1 {
		t.Errorf("nodes: %+v, want 5 nodes of max_tasks 1 (8 slots of concurrency / 5)", n)
	}
}
