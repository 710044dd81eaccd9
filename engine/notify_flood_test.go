package engine_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/notifier"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// Any role that may connect to the catalog's database may NOTIFY on deckhand's channels:
// PostgreSQL has no privilege for it. A role with no deckhand role at all floods each channel
// with distinct notifications (PostgreSQL merges only identical ones) for a second, while a
// worker that leads (so its cleaner runs) runs a task (so cancellations concern it). Each
// notification used to cost the catalog a round trip: a claim, a read of the tasks to stop,
// a cleanup pass, back to back. Now those that find nothing are bounded; work submitted during
// and after the flood, and a cancellation, still reach the worker by their notifications (it
// never polls here).
func TestAttackNotifyFloodCostsTheCatalogLittle(t *testing.T) {
	f := newNotifyFlood(t)
	sleeps := submit(t, f.e, &spec.Job{Tasks: []spec.Task{{Name: "sleeps", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT pg_sleep(60)"}}})
	testenv.Eventually(t, 10*time.Second, func() bool { return detail(t, f.e, sleeps).Tasks[0].State == deckhandtype.TaskRunning },
		"the task runs")

	// The budget allows 4 wake-ups for nothing at once, then 10 a second (the cleaner 5);
	// the bounds are twice that, and ten more, over the time the flood took to arrive,
	// against hundreds of claims and thousands of statements a second before.
	var during int64
	claims, _, took := f.flood(catalog.ChannelRunnable, "", func() { during = submit(t, f.e, noopJob) })
	if limit := 10 + int(took/(50*time.Millisecond)); claims > limit {
		t.Errorf("a flood of %s for %s cost %d claims, want at most %d", catalog.ChannelRunnable, took, claims, limit)
	}
	waitDone(t, f.e, during, 5*time.Second, "submitted during the flood")
	for _, ch := range []struct{ channel, payload string }{
		{catalog.ChannelCancel, ""},
		{catalog.ChannelCleanup, ""},
		{catalog.ChannelJob, ":failed"}, // a job that ended: what the cleaner wakes for
	} {
		// A cleanup pass is about ten statements; the worker's own rounds (lease, leader,
		// progress) some thirty a second.
		_, stmts, took := f.flood(ch.channel, ch.payload, nil)
		if limit := 100 + int(took/(5*time.Millisecond)); stmts > limit {
			t.Errorf("a flood of %s for %s cost %d catalog statements, want at most %d", ch.channel, took, stmts, limit)
		}
	}

	waitDone(t, f.e, submit(t, f.e, noopJob), 5*time.Second, "submitted after the flood")
	if _, err := f.e.Client.Cancel(ctx, sleeps); err != nil {
		t.Fatal(err)
	}
	if job := f.e.Wait(sleeps, 10*time.Second); job.State != deckhandtype.JobCancelled {
		t.Errorf("the cancelled job is %s", job.State)
	}
}

// notifyFlood is a worker whose catalog statements and claims are counted, and a role with no
// deckhand role connected to the catalog's database.
type notifyFlood struct {
	t          *testing.T
	e          *testenv.Env
	intruder   *pgx.Conn
	statements *statementCounter
	metrics    *prometheus.Registry
	arrived    *notifier.Subscription // of floodEnd
}

// floodEnd is the channel of the notification that follows a flood.
const floodEnd = "flood_end"

func newNotifyFlood(t *testing.T) *notifyFlood {
	f := &notifyFlood{t: t, e: testenv.New(t), statements: &statementCounter{bySQL: map[string]int{}}, metrics: prometheus.NewRegistry()}
	f.e.AddNode("n1", 4)
	pcfg, err := pgxpool.ParseConfig(f.e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 16
	pcfg.ConnConfig.Tracer = f.statements
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	// The worker shares the test's notifier, as in `deckhand serve`: the test learns from it
	// when a flood has reached the worker.
	n := notifier.New(pool.Config().ConnConfig, testenv.Quiet())
	nctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); n.Run(nctx) }()
	t.Cleanup(func() { stop(); <-done })
	f.arrived = n.Subscribe(1, floodEnd)
	t.Cleanup(f.arrived.Close)
	// The leader's rounds a second apart, as in production.
	w, _ := f.e.WorkerOn(catalog.New(pool), engine.Config{Notifier: n, PollInterval: time.Hour, MaintenanceInterval: time.Second,
		Metrics: engine.NewMetrics(f.metrics), Logger: testenv.Quiet()})
	testenv.Eventually(t, 10*time.Second, w.Leading, "the worker leads, so its cleaner runs")
	select {
	case <-f.arrived.Resync():
	case <-time.After(10 * time.Second):
		t.Fatal("the notifier does not listen")
	}
	f.intruder, err = pgx.Connect(ctx, f.e.RoleDSN(f.e.Role("intruder")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.intruder.Close(ctx) })
	return f
}

// flood sends distinct notifications on channel (numbers followed by payload) for a second,
// calling during (unless nil) half-way. Once they have all reached the worker it returns the
// claims it made and the catalog statements it sent meanwhile, and how long that took.
func (f *notifyFlood) flood(channel, payload string, during func()) (claims, stmts int, took time.Duration) {
	t := f.t
	t.Helper()
	claimsBefore, statementsBefore := fetchClaims(t, f.metrics), f.statements.snapshot()
	sent := 0
	began := time.Now()
	for time.Since(began) < time.Second {
		var n int
		err := f.intruder.QueryRow(ctx, `SELECT pg_catalog.count(pg_catalog.pg_notify($1, g::text || $2))
			FROM pg_catalog.generate_series(1, 200) g`, channel, payload).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
		if during != nil && time.Since(began) > time.Second/2 {
			during()
			during = nil
		}
		// Paced, so that the notifier keeps up: what is measured is what reaches the worker.
		time.Sleep(20 * time.Millisecond)
	}
	// Notifications reach a listener in the order they were sent: once this one has reached
	// the notifier, so has the flood.
	if _, err := f.intruder.Exec(ctx, `SELECT pg_catalog.pg_notify($1, '')`, floodEnd); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.arrived.C():
	case <-time.After(30 * time.Second):
		t.Fatalf("the flood of %s did not reach the notifier within 30s", channel)
	}
	time.Sleep(200 * time.Millisecond) // what the subscribers hold in their buffers
	took = time.Since(began)
	claims = fetchClaims(t, f.metrics) - claimsBefore
	stmts, top := f.statements.since(statementsBefore, 4)
	t.Logf("%s: %d notifications in %s; meanwhile %d claims, %d catalog statements; most frequent: %s",
		channel, sent, took.Round(time.Millisecond), claims, stmts, top)
	return claims, stmts, took
}

// fetchClaims is how many claims the worker made through its fetch loop, as its claim
// latency metric counts them.
func fetchClaims(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != "deckhand_claim_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "via" && l.GetValue() == "fetch" {
					n += int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return n
}

// statementCounter counts the statements sent on the connections it traces, by the start of
// their text.
type statementCounter struct {
	mu    sync.Mutex
	bySQL map[string]int
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	sql := strings.Join(strings.Fields(data.SQL), " ")
	if len(sql) > 60 {
		sql = sql[:60]
	}
	c.mu.Lock()
	c.bySQL[sql]++
	c.mu.Unlock()
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch (a claim is one) as one statement, named by its first.
func (c *statementCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	first := ""
	if len(data.Batch.QueuedQueries) > 0 {
		first = data.Batch.QueuedQueries[0].SQL
	}
	return c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: "batch: " + first})
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// snapshot is how many of each statement were sent so far.
func (c *statementCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.bySQL)
}

// since is how many of each statement were sent since before, in all and the n most frequent
// (with their counts).
func (c *statementCounter) since(before map[string]int, n int) (total int, top string) {
	now := c.snapshot()
	for sql := range now {
		now[sql] -= before[sql]
		total += now[sql]
	}
	sqls := slices.SortedFunc(maps.Keys(now), func(a, b string) int { return cmp.Compare(now[b], now[a]) })
	var parts []string
	for _, sql := range sqls[:min(n, len(sqls))] {
		parts = append(parts, fmt.Sprintf("%d× %q", now[sql], sql))
	}
	return total, strings.Join(parts, "; ")
}
