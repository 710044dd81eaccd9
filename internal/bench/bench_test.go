package bench

import (
	"context"
	"io"
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
	if s := res.Scale; s == nil || s.TasksPerS <= 0 || s.SQLTasksPerS <= 0 || s.IdleClaimMS <= 0 || len(res.SubmitS) != 2 {
		t.Errorf("bench measured nothing at scale: %+v", s)
	}
	for _, key := range []string{"pgbench_select_tps=", "scale_sql_ratio=", "idle_claim_ms=", "submit_100k_s="} {
		if !strings.Contains(res.Line(), key) {
			t.Errorf("the last line lacks %s: %s", key, res.Line())
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
