package bench_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/bench"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func deckhand(t *testing.T, timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errOut testenv.Buffer
	code = cli.Main(ctx, args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// `deckhand bench move` on a server given as a URL: the move and pg_dump | psql both move the
// schema, the writer's writes are timed, and the target equals the source at the cut-over.
func TestBenchMove(t *testing.T) {
	cl := testenv.LogicalCluster(t)
	server := cl.URL("postgres", pgcluster.Superuser)
	code, out, errOut := deckhand(t, 5*time.Minute, "--catalog", server, "bench", "move", "--size", "20MB", "--write-rate", "100", "-o", "json")
	if code != 0 {
		t.Fatalf("bench move: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s%s", errOut, out)
	var res bench.MoveResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	if res.SchemaBytes < 19<<20 || res.Rows <= 0 || res.MoveMBPerS <= 0 || res.DumpMBPerS <= 0 || res.Ratio <= 0 ||
		len(res.DumpSeconds) != 2 || res.Writes <= 0 || res.WritesPerS <= 0 || res.LongestWriteMS <= 0 || res.P99WriteMS <= 0 || res.BudgetMS != 2000 {
		t.Errorf("bench move measured nothing: %+v", res)
	}
	for _, table := range []string{"customers", "orders", "events", "writes"} {
		if !strings.HasPrefix(res.Checksums[table], "rows=") || res.Checksums[table] == "rows=0 md5sum=0" && table != "writes" {
			t.Errorf("checksum of %s: %q", table, res.Checksums[table])
		}
	}
	if !strings.Contains(errOut, "checksums: the 4 tables of the target equal the source's") {
		t.Errorf("the human lines lack the checksum verdict:\n%s", errOut)
	}
	// The scratch databases are gone.
	conn, err := cl.Connect(context.Background(), "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname LIKE 'deckhand_bench%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d scratch databases left (%v)", left, err)
	}
}

// A server that cannot run moves is refused in one line, and bad flags are usage errors.
func TestBenchMoveRefusals(t *testing.T) {
	server := pgtest.Shared(t).URL("postgres", pgcluster.Superuser)
	code, _, errOut := deckhand(t, time.Minute, "--catalog", server, "bench", "move", "--size", "1MB")
	if code == 0 || !strings.Contains(errOut, "wal_level=logical") {
		t.Errorf("bench move on a server without wal_level=logical: exit %d, %s", code, errOut)
	}
	code, _, errOut = deckhand(t, time.Minute, "--catalog", server, "bench", "move", "--size", "lots")
	if code != 2 || !strings.Contains(errOut, "--size") {
		t.Errorf("--size lots: exit %d, %s", code, errOut)
	}
}
