// Command rivercmp is a reference benchmark of River (github.com/riverqueue/river)
// to compare deckhand's throughput against on the same PostgreSQL server.
//
// It creates a throwaway schema, migrates River into it, measures
//
//  1. throughput: N no-op jobs inserted in batches, then worked by one client, or by
//     --clients clients sharing --workers evenly, each with its own pgx pool;
//  2. chain latency: a chain of jobs where each worker inserts the next one,
//     the closest River analogue of a job dependency,
//
// drops the schema again and prints the results as key=value pairs on the
// last line of stdout.
//
// Client settings mirrored from River's own benchmark, cmd/river/riverbench/
// river_bench.go (the `river bench` command; that module is not on the Go
// module proxy, so it was read from the River repository's source):
//   - FetchCooldown 2ms and FetchPollInterval 20ms;
//   - MaxWorkers 2000 on the default queue (--workers);
//   - inserts in batches of 5000 (insertBatchSize), with InsertManyFast (COPY) by default;
//   - completions counted through a subscription (completed/failed/cancelled
//     events) rather than from inside the worker;
//   - the pgx pool with pgxpool's defaults (set pool_max_conns in --dsn to change); with
//     --clients K, each client has a pool of its own with those defaults, as K processes would.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const insertBatchSize = 5_000 // riverbench's insertBatchSize

// NoopArgs is the throughput job; its worker does nothing.
type NoopArgs struct {
	Num int `json:"num"`
}

func (NoopArgs) Kind() string { return "rivercmp_noop" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

// ChainArgs is one link of the latency chain.
type ChainArgs struct {
	Link int `json:"link"`
}

func (ChainArgs) Kind() string { return "rivercmp_chain" }

// chainWorker records when each link starts working and when its worker
// returns; link i's latency is started[i] - returned[i-1].
type chainWorker struct {
	river.WorkerDefaults[ChainArgs]
	links    int
	mu       sync.Mutex
	started  []time.Time
	returned []time.Time
	done     chan struct{}
}

func (w *chainWorker) Work(ctx context.Context, job *river.Job[ChainArgs]) error {
	start := time.Now()
	link := job.Args.Link
	if link < w.links {
		client := river.ClientFromContext[pgx.Tx](ctx)
		if _, err := client.Insert(ctx, ChainArgs{Link: link + 1}, nil); err != nil {
			return err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started[link] = start
	w.returned[link] = time.Now()
	if link == w.links {
		close(w.done)
	}
	return nil
}

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL conninfo or URL of an existing database (required)")
	jobs := flag.Int("jobs", 50_000, "number of no-op jobs for the throughput run")
	chain := flag.Int("chain", 1_000, "number of links in the latency chain (0 to skip)")
	workers := flag.Int("workers", 2_000, "River MaxWorkers for the default queue (riverbench uses 2000)")
	clients := flag.Int("clients", 1, "River clients, each with its own pgx pool, sharing --workers evenly; all are started together")
	fast := flag.Bool("insert-fast", true, "insert with InsertManyFast (COPY); false: InsertMany")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *dsn == "" || *jobs < 1 || *chain < 0 || *clients < 1 || *workers < *clients {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dsn, *jobs, *chain, *workers, *clients, *fast, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "rivercmp:", err)
		os.Exit(1)
	}
}

func run(dsn string, jobs, chain, workers, clients int, fast bool, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Fresh schema for River's tables, dropped at the end whatever happens.
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	schema := "rivercmp_" + hex.EncodeToString(suffix)
	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		return err
	}
	defer func() {
		dropCtx, dropCancel := context.WithTimeout(context.Background(), time.Minute)
		defer dropCancel()
		if _, err := pool.Exec(dropCtx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "rivercmp: dropping schema:", err)
		}
	}()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger, Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}

	chainW := &chainWorker{
		links:    chain,
		started:  make([]time.Time, chain+1),
		returned: make([]time.Time, chain+1),
		done:     make(chan struct{}),
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	river.AddWorker(ws, chainW)
	// Client i gets its share of MaxWorkers and a pool of its own (the first reuses the pool
	// that migrated), as separate processes would have.
	all := make([]*river.Client[pgx.Tx], clients)
	for i := range all {
		p := pool
		if i > 0 {
			if p, err = pgxpool.New(ctx, dsn); err != nil {
				return err
			}
			defer p.Close()
		}
		share := workers / clients
		if i < workers%clients {
			share++
		}
		all[i], err = river.NewClient(riverpgxv5.New(p), &river.Config{
			FetchCooldown:     2 * time.Millisecond,  // riverbench
			FetchPollInterval: 20 * time.Millisecond, // riverbench
			Logger:            logger,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: share}},
			Schema:            schema,
			Workers:           ws,
		})
		if err != nil {
			return err
		}
	}
	client := all[0] // inserts the jobs and starts the chain
	fmt.Printf("settings: schema=%s jobs=%d chain=%d workers=%d clients=%d insert_batch=%d insert_fast=%t fetch_cooldown=2ms fetch_poll_interval=20ms pool_max_conns=%d\n",
		schema, jobs, chain, workers, clients, insertBatchSize, fast, pool.Config().MaxConns)

	// Throughput: insert everything, then start the clients and count completion events (each
	// client reports the jobs it completed) until all jobs are done.
	fwdCtx, stopForwarding := context.WithCancel(ctx)
	defer stopForwarding()
	events := make(chan *river.Event, max(jobs, 1_000))
	var unsubscribes []func()
	var unsubscribeOnce sync.Once
	unsubscribeAll := func() {
		unsubscribeOnce.Do(func() {
			for _, u := range unsubscribes {
				u()
			}
		})
	}
	defer unsubscribeAll()
	for _, c := range all {
		sub, unsubscribe := c.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: max(jobs, 1_000),
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		unsubscribes = append(unsubscribes, unsubscribe)
		go forward(fwdCtx, sub, events)
	}
	insertStart := time.Now()
	batch := make([]river.InsertManyParams, 0, insertBatchSize)
	for i := 0; i < jobs; i += insertBatchSize {
		batch = batch[:0]
		for j := i; j < min(i+insertBatchSize, jobs); j++ {
			batch = append(batch, river.InsertManyParams{Args: NoopArgs{Num: j}})
		}
		if fast {
			_, err = client.InsertManyFast(ctx, batch)
		} else {
			_, err = client.InsertMany(ctx, batch)
		}
		if err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
	}
	workStart := time.Now() // the first client.Start
	if err := startAll(ctx, all); err != nil {
		return err
	}
	defer func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
		defer stopCancel()
		var wg sync.WaitGroup
		for _, c := range all {
			wg.Go(func() { _ = c.Stop(stopCtx) })
		}
		wg.Wait()
	}()
	for done := 0; done < jobs; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d ended as %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-ctx.Done():
			return fmt.Errorf("throughput run: %d of %d jobs done: %w", done, jobs, ctx.Err())
		}
	}
	end := time.Now()
	stopForwarding()
	unsubscribeAll()
	total := float64(jobs) / end.Sub(insertStart).Seconds()
	work := float64(jobs) / end.Sub(workStart).Seconds()
	fmt.Printf("throughput: %d jobs, insert %s, work %s, total %s\n",
		jobs, workStart.Sub(insertStart).Round(time.Millisecond),
		end.Sub(workStart).Round(time.Millisecond), end.Sub(insertStart).Round(time.Millisecond))
	result := fmt.Sprintf("river_jobs_per_s=%.2f river_work_jobs_per_s=%.2f", total, work)

	// Chain latency: start link 1 and wait for the last link to finish.
	if chain > 0 {
		if _, err := client.Insert(ctx, ChainArgs{Link: 1}, nil); err != nil {
			return err
		}
		select {
		case <-chainW.done:
		case <-ctx.Done():
			return fmt.Errorf("chain run: %w", ctx.Err())
		}
		chainW.mu.Lock()
		lat := make([]float64, 0, chain-1)
		for i := 2; i <= chain; i++ {
			lat = append(lat, float64(chainW.started[i].Sub(chainW.returned[i-1]))/float64(time.Millisecond))
		}
		chainW.mu.Unlock()
		p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
		fmt.Printf("chain: %d links, %d hand-offs measured\n", chain, len(lat))
		result += fmt.Sprintf(" river_chain_p50_ms=%.2f river_chain_p99_ms=%.2f", p50, p99)
	}
	fmt.Println(result)
	return nil
}

// startAll starts every client at once and waits for them all to have started.
func startAll(ctx context.Context, all []*river.Client[pgx.Tx]) error {
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Go(func() { errs[i] = c.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forward passes a client's events on to the channel the throughput run counts.
func forward(ctx context.Context, from <-chan *river.Event, to chan<- *river.Event) {
	for {
		select {
		case ev, ok := <-from:
			if !ok {
				return
			}
			select {
			case to <- ev:
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// percentile returns the nearest-rank p-quantile of xs (NaN when empty).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(p*float64(len(s))))-1)]
}
