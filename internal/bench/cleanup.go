package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// CleanupOptions choose the deferred-drop benchmark's size.
type CleanupOptions struct {
	CatalogDSN string        // server to use; empty starts a throwaway cluster
	Rounds     int           // drops measured per path
	Hold       time.Duration // how long the conflicting SELECT holds the table
}

// CleanupResult holds the figures of the deferred-drop benchmark.
type CleanupResult struct {
	LockTimeout time.Duration
	// From the end of the last query using the table to the table being gone: through
	// `deckhand drop` (the drop task kind), and through the cleaner on the leader (a
	// deferred_on_success record of an operation that succeeded).
	DropAfter, DeferredAfter []time.Duration
	// The longest statement of concurrent writers (INSERT into another table) and readers of
	// the table while a drop was pending.
	MaxWriterWait, MaxReaderWait time.Duration
	Writes, Reads                int
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func p50max(ds []time.Duration) (p50, mx time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[len(s)-1]
}

// Summary is the run's figures, as the last line gives them.
func (r *CleanupResult) Summary() Summary {
	d50, dmax := p50max(r.DropAfter)
	c50, cmax := p50max(r.DeferredAfter)
	var s Summary
	s.add("lock_timeout_ms", ms(r.LockTimeout), 0)
	s.add("drop_after_query_ms_p50", ms(d50), 1)
	s.add("drop_after_query_ms_max", ms(dmax), 1)
	s.add("deferred_after_query_ms_p50", ms(c50), 1)
	s.add("deferred_after_query_ms_max", ms(cmax), 1)
	s.add("writer_wait_ms_max", ms(r.MaxWriterWait), 1)
	s.add("reader_wait_ms_max", ms(r.MaxReaderWait), 1)
	return s
}

// RunCleanup measures deferred drops with default settings: how soon after the last
// conflicting query a table goes, and how long concurrent statements wait meanwhile.
func RunCleanup(ctx context.Context, o CleanupOptions, out io.Writer) (*CleanupResult, error) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	if o.Hold <= 0 {
		o.Hold = 2 * time.Second
	}
	server, stopServer, err := startServer(ctx, o.CatalogDSN, out)
	if err != nil {
		return nil, err
	}
	defer stopServer()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.Background()) //nolint:errcheck
	var version string
	if err := admin.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return nil, err
	}
	catalogDSN, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return nil, err
	}
	defer dropCatalog()
	nodeDB, dropNode, err := scratchDB(ctx, admin, "deckhand_bench_cleanup_node")
	if err != nil {
		return nil, err
	}
	defer dropNode()
	nodeDSN := withDB(server, nodeDB)
	if err := client.AddNode(ctx, deckhandtype.Node{Name: "bench", DSN: nodeDSN, MaxTasks: 4}); err != nil {
		return nil, err
	}
	res := &CleanupResult{LockTimeout: cleanup.LockTimeout(ctx, client.Catalog())}
	fmt.Fprintf(out, "server: PostgreSQL %s; lock timeout %s; a SELECT holds each table for %s\n", version, res.LockTimeout, o.Hold)

	// A worker with default settings: the engine runs the cleaner on its leader.
	pools := nodeconn.NewPools(8)
	defer pools.Close()
	cat, err := catalog.Open(ctx, catalogDSN)
	if err != nil {
		return nil, err
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{Concurrency: 8, Features: []engine.Feature{drop.Feature()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	go func() { defer close(workerDone); w.Run(wctx) }() //nolint:errcheck
	defer func() { stopWorker(); <-workerDone }()
	for !w.Leading() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	node, err := pgx.Connect(ctx, nodeDSN)
	if err != nil {
		return nil, err
	}
	defer node.Close(context.Background()) //nolint:errcheck
	if _, err := node.Exec(ctx, `CREATE TABLE sink (v int)`); err != nil {
		return nil, err
	}
	cl := cleanup.New(client.Catalog(), pools)

	for round := range o.Rounds {
		for _, path := range []string{"drop", "deferred"} {
			table := fmt.Sprintf("bench_%s_%d", path, round)
			if _, err := node.Exec(ctx, `CREATE TABLE `+table+` AS SELECT g AS id FROM generate_series(1, 10000) g`); err != nil {
				return nil, err
			}
			m, err := measureDrop(ctx, nodeDSN, table, o.Hold, func() error {
				if path == "drop" {
					payload, _ := json.Marshal(drop.Payload{Tables: []string{table}})
					_, err := client.Submit(ctx, &spec.Job{Kind: drop.KindDrop, Tasks: []spec.Task{{
						Name: "drop", Kind: drop.KindDrop, Node: "bench", Payload: payload}}})
					return err
				}
				// An operation that replaces the table and succeeds: a job-wide operation of a
				// short job, whose end the leader's cleaner hears about.
				id, err := client.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "work", Node: "bench", SQL: "SELECT pg_sleep(0.3)"}}})
				if err != nil {
					return err
				}
				job, err := client.JobRow(ctx, id)
				if err != nil {
					return err
				}
				op, err := cl.BeginJob(ctx, id, job.SubmittedBy, "bench")
				if err != nil {
					return err
				}
				_, err = op.Register(ctx, cleanup.Table("bench", "public", table), cleanup.DeferredOnSuccess)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", path, round, err)
			}
			if path == "drop" {
				res.DropAfter = append(res.DropAfter, m.after)
			} else {
				res.DeferredAfter = append(res.DeferredAfter, m.after)
			}
			res.MaxWriterWait = max(res.MaxWriterWait, m.maxWrite)
			res.MaxReaderWait = max(res.MaxReaderWait, m.maxRead)
			res.Writes += m.writes
			res.Reads += m.reads
			fmt.Fprintf(out, "%-8s round %d: dropped %7.1f ms after the SELECT ended; longest write %6.1f ms, read %6.1f ms (%d writes, %d reads)\n",
				path, round+1, ms(m.after), ms(m.maxWrite), ms(m.maxRead), m.writes, m.reads)
		}
	}
	d50, dmax := p50max(res.DropAfter)
	c50, cmax := p50max(res.DeferredAfter)
	fmt.Fprintf(out, "deckhand drop: table gone %.1f ms (p50), %.1f ms (max) after the last conflicting query (target < 1000 ms)\n", ms(d50), ms(dmax))
	fmt.Fprintf(out, "cleaner:       table gone %.1f ms (p50), %.1f ms (max) after the last conflicting query (target < 1000 ms)\n", ms(c50), ms(cmax))
	fmt.Fprintf(out, "longest wait of a concurrent writer %.1f ms, of a reader of the table %.1f ms (lock timeout %.0f ms)\n",
		ms(res.MaxWriterWait), ms(res.MaxReaderWait), ms(res.LockTimeout))
	return res, nil
}

type dropMeasure struct {
	after             time.Duration
	maxWrite, maxRead time.Duration
	writes, reads     int
}

// measureDrop holds table with a SELECT for hold, starts a writer into another table and a
// reader of the table, asks for the drop with start, and times everything until the table is gone.
func measureDrop(ctx context.Context, dsn, table string, hold time.Duration, start func() error) (*dropMeasure, error) {
	conns := make([]*pgx.Conn, 4)
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return nil, err
		}
		defer c.Close(context.Background()) //nolint:errcheck
		conns[i] = c
	}
	long, writer, reader, probe := conns[0], conns[1], conns[2], conns[3]
	m := &dropMeasure{}
	var mu sync.Mutex
	var selectEnded time.Time
	selectErr := make(chan error, 1)
	go func() {
		_, err := long.Exec(ctx, `SELECT pg_sleep($1), count(*) FROM `+table, hold.Seconds())
		mu.Lock()
		selectEnded = time.Now()
		mu.Unlock()
		selectErr <- err
	}()
	for {
		var holding bool
		if err := probe.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass($1) AND granted)`, table).Scan(&holding); err != nil {
			return nil, err
		}
		if holding {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(conn *pgx.Conn, sql string, maxWait *time.Duration, n *int) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			_, err := conn.Exec(ctx, sql)
			took := time.Since(began)
			mu.Lock()
			*maxWait = max(*maxWait, took)
			*n++
			mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wg.Add(2)
	go loop(writer, `INSERT INTO sink VALUES (1)`, &m.maxWrite, &m.writes)
	go loop(reader, `SELECT count(*) FROM `+table, &m.maxRead, &m.reads)
	defer func() { close(stop); wg.Wait() }()
	if err := start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(hold + time.Minute)
	for {
		var gone bool
		if err := probe.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, table).Scan(&gone); err != nil {
			return nil, err
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("table %s was never dropped", table)
		}
		time.Sleep(time.Millisecond)
	}
	gone := time.Now()
	if err := <-selectErr; err != nil {
		return nil, fmt.Errorf("the conflicting SELECT failed: %w", err)
	}
	mu.Lock()
	m.after = gone.Sub(selectEnded)
	mu.Unlock()
	return m, nil
}
