package drop_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A drop checks the table's pins again once it holds the table's ACCESS EXCLUSIVE lock, in
// the catalog. Everyone who uses the table queues behind that lock meanwhile: a catalog that
// does not answer (a network that drops packets, a catalog failing over) must not hold them
// there for as long as it does not answer. The drop gives its lock up and tries again later.
func TestDropGivesUpItsLockWhenThePinCheckStalls(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE held (id int)`)
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	cat, err := catalog.Open(ctx, proxy.DSN(e.DB, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{Concurrency: 2, Features: []engine.Feature{drop.Feature()}, NoCleaner: true,
		MaintenanceInterval: 100 * time.Millisecond, Logger: testenv.Quiet()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	reader := e.NodeConn(db, pgcluster.Superuser)
	if _, err := reader.Exec(ctx, `BEGIN; SELECT FROM held`); err != nil {
		t.Fatal(err)
	}
	out := clitest.Run(t, e.DSN, "drop", "--node", "n1", "public.held")
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("deckhand drop printed %q", out)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		d, err := e.Client.Job(ctx, id)
		return err == nil && d.Tasks[0].State == deckhandtype.TaskRunning
	}, "the drop runs, waiting for the reader")
	time.Sleep(300 * time.Millisecond) // past the drop's first check
	// The catalog stops answering (its statements are prepared: every message stalls).
	unstall := proxy.AddRule(pgtest.Rule{Name: "silent", Action: pgtest.ActionStall})
	defer unstall()
	if _, err := reader.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		err := user(t, e, db).QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks l
			WHERE l.relation = 'public.held'::regclass AND l.mode = 'AccessExclusiveLock' AND l.granted`).Scan(&n)
		return err == nil && n > 0
	}, "the drop holds the table's lock")
	// A reader of the table gets it within seconds, not once the catalog answers again.
	start := time.Now()
	if _, err := user(t, e, db).Exec(ctx, `SET statement_timeout = '8s'; SELECT count(*) FROM held`); err != nil {
		t.Fatalf("a reader of the table while the drop's pin check stalled: %v (after %s)", err, time.Since(start).Round(100*time.Millisecond))
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a reader of the table waited %s behind the drop's lock", took.Round(100*time.Millisecond))
	}
	unstall()
	if job := e.Wait(id, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("the drop, once the catalog answers: %s", job.State)
	}
	if e.TableExists(db, "held") {
		t.Error("held was not dropped once the catalog answered")
	}
}

// user is a session of the table's users, on the node.
func user(t *testing.T, e *testenv.Proxied, db string) *pgx.Conn {
	t.Helper()
	return e.NodeConn(db, pgcluster.Superuser)
}
