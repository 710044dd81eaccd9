package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/spec"
)

func jobOfTask(t spec.Task) *spec.Job {
	return &spec.Job{Description: "bench move", Tasks: []spec.Task{t}}
}

// The moved schema: customers, orders and events (a jsonb column) with indexes, and the
// writer's table.
const moveDDL = `CREATE SCHEMA bench_move;
CREATE TABLE bench_move.customers (id bigint PRIMARY KEY, name text NOT NULL, email text NOT NULL);
CREATE UNIQUE INDEX ON bench_move.customers (email);
CREATE TABLE bench_move.orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, amount numeric(12,2) NOT NULL,
	created_at timestamptz NOT NULL, note text);
CREATE INDEX ON bench_move.orders (customer_id);
CREATE TABLE bench_move.events (id bigint PRIMARY KEY, kind text NOT NULL, doc jsonb NOT NULL);
CREATE INDEX ON bench_move.events ((doc->>'customer'));
CREATE TABLE bench_move.writes (id bigint PRIMARY KEY, payload text NOT NULL);`

// fillRounds inserts the rows numbered $1..$2: a customer for every fifth, an order and an
// event for each.
var fillRounds = []string{
	`INSERT INTO bench_move.customers SELECT g, 'customer ' || g, 'c' || g || '@example.com'
		FROM generate_series($1::bigint, $2::bigint) g WHERE g % 5 = 0`,
	`INSERT INTO bench_move.orders SELECT g, g % 100000, (g % 100000) / 100.0,
		timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', repeat('n', 20 + (g % 40)::int)
		FROM generate_series($1::bigint, $2::bigint) g`,
	`INSERT INTO bench_move.events SELECT g, 'k' || g % 7,
		jsonb_build_object('customer', g % 100000, 'tags', jsonb_build_array('a', g % 3), 'text', repeat('e', 30 + (g % 50)::int))
		FROM generate_series($1::bigint, $2::bigint) g`,
}

const schemaSize = `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
	WHERE c.relnamespace = 'bench_move'::regnamespace AND c.relkind = 'r'`

// fillSchema creates the schema and fills it until its tables, indexes and TOAST reach size
// bytes; it returns their size and the rows inserted.
func fillSchema(ctx context.Context, conn *pgx.Conn, size int64) (bytesNow, rows int64, err error) {
	if _, err := conn.Exec(ctx, moveDDL); err != nil {
		return 0, 0, err
	}
	next, batch := int64(1), int64(2000)
	for {
		for _, sql := range fillRounds {
			if _, err := conn.Exec(ctx, sql, next, next+batch-1); err != nil {
				return 0, 0, err
			}
		}
		next += batch
		if err := conn.QueryRow(ctx, schemaSize).Scan(&bytesNow); err != nil {
			return 0, 0, err
		}
		if bytesNow >= size*98/100 {
			break
		}
		// Aim at what is left, from the bytes each numbered row has taken so far.
		perRow := max(bytesNow/(next-1), 1)
		batch = min(max((size-bytesNow)/perRow, 1000), 500000)
	}
	for _, t := range []string{"customers", "orders", "events", "writes"} {
		// Both the move and pg_dump then read tables with hint bits set and statistics.
		if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) bench_move.`+t); err != nil {
			return 0, 0, err
		}
	}
	if err := conn.QueryRow(ctx, schemaSize).Scan(&bytesNow); err != nil {
		return 0, 0, err
	}
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM bench_move.customers) + 2 * $1::bigint`, next-1).Scan(&rows); err != nil {
		return 0, 0, err
	}
	return bytesNow, rows, nil
}

// dumpRestore times pg_dump -n bench_move from the database at from piped into psql on the
// database at to. Both programs get their connection through libpq's environment, built
// from the parsed conninfo (no password on a command line).
func dumpRestore(ctx context.Context, from, to string) (time.Duration, error) {
	dumpBin, err := pgcluster.ClientProgram("pg_dump")
	if err != nil {
		return 0, err
	}
	psqlBin, err := pgcluster.ClientProgram("psql")
	if err != nil {
		return 0, err
	}
	fromEnv, err := libpqEnv(from)
	if err != nil {
		return 0, err
	}
	toEnv, err := libpqEnv(to)
	if err != nil {
		return 0, err
	}
	dump := exec.CommandContext(ctx, dumpBin, "-n", "bench_move")
	dump.Env = append(os.Environ(), fromEnv...)
	restore := exec.CommandContext(ctx, psqlBin, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-o", os.DevNull)
	restore.Env = append(os.Environ(), toEnv...)
	var dumpErr, restoreErr bytes.Buffer
	dump.Stderr, restore.Stderr = &dumpErr, &restoreErr
	pipe, err := dump.StdoutPipe()
	if err != nil {
		return 0, err
	}
	restore.Stdin = pipe
	start := time.Now()
	if err := dump.Start(); err != nil {
		return 0, err
	}
	if err := restore.Start(); err != nil {
		dump.Process.Kill() //nolint:errcheck
		dump.Wait()         //nolint:errcheck
		return 0, err
	}
	errD, errR := dump.Wait(), restore.Wait()
	took := time.Since(start)
	if errD != nil {
		return 0, fmt.Errorf("pg_dump: %w: %s", errD, firstLine(dumpErr.String()))
	}
	if errR != nil {
		return 0, fmt.Errorf("psql: %w: %s", errR, firstLine(restoreErr.String()))
	}
	return took, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// checksums returns, per table of bench_move, its row count and the sum of its rows' md5s
// (order-free, and computed as it streams: no table is held in memory).
func checksums(ctx context.Context, dsn string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	rows, err := conn.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = 'bench_move'::regnamespace AND relkind = 'r' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for _, t := range tables {
		var n int64
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(('x' || substr(md5(r::text), 1, 15))::bit(60)::bigint::numeric), 0)::text FROM `+
			pgx.Identifier{"bench_move", t}.Sanitize()+` r`).Scan(&n, &sum); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		sums[t] = fmt.Sprintf("rows=%d md5sum=%s", n, sum)
	}
	return sums, nil
}

// writer inserts into bench_move.writes at a steady rate and times each write, until a write
// fails because the schema moved. It spreads the rate over connections of at most
// writesPerConn writes per second each, as an application with a pool would, so that one
// slow commit does not lower the rate.
type writer struct {
	done chan struct{}
	quit chan struct{}
	once sync.Once

	mu           sync.Mutex
	lat          []float64 // ms, of every write, refused or not
	committed    []int64
	first, last  time.Time // of the first write, and the end of the last committed one
	moved, other error
}

const writesPerConn = 50

func startWriter(ctx context.Context, dsn string, rate int) (*writer, error) {
	n := (rate + writesPerConn - 1) / writesPerConn
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close(context.Background()) //nolint:errcheck
			}
			return nil, err
		}
		conns[i] = conn
	}
	w := &writer{done: make(chan struct{}), quit: make(chan struct{})}
	var wg sync.WaitGroup
	interval := time.Second * time.Duration(n) / time.Duration(rate)
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the connections' writes evenly over the interval.
			time.Sleep(interval * time.Duration(i) / time.Duration(n))
			w.run(ctx, conn, interval, int64(i+1), int64(n))
		}()
	}
	go func() { wg.Wait(); close(w.done) }()
	return w, nil
}

// run writes on conn every interval rows numbered first, first+step, ...
func (w *writer) run(ctx context.Context, conn *pgx.Conn, interval time.Duration, first, step int64) {
	defer conn.Close(context.Background()) //nolint:errcheck
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for id := first; ; id += step {
		select {
		case <-w.quit:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		_, err := conn.Exec(ctx, `INSERT INTO bench_move.writes VALUES ($1::bigint, md5($1::bigint::text))`, id)
		end := time.Now()
		w.mu.Lock()
		w.lat = append(w.lat, ms(end.Sub(start)))
		if w.first.IsZero() || start.Before(w.first) {
			w.first = start
		}
		switch {
		case err == nil:
			w.committed = append(w.committed, id)
			if end.After(w.last) {
				w.last = end
			}
		case strings.Contains(err.Error(), "moved to group"):
			w.moved = err
		default:
			w.other = err
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// achievedRate is the committed writes per second, from the first write to the last commit.
func (w *writer) achievedRate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.committed) < 2 {
		return 0
	}
	return float64(len(w.committed)) / w.last.Sub(w.first).Seconds()
}

func (w *writer) stop() {
	w.once.Do(func() { close(w.quit) })
	<-w.done
}

// finish waits for the writer's first write after the cut-over, which must fail loudly.
func (w *writer) finish(timeout time.Duration) error {
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.stop()
		return errors.New("the writer kept writing to the source after the move")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.other != nil {
		return fmt.Errorf("a write to the source failed other than for the move: %w", w.other)
	}
	return nil
}

// latencies are the writes' times in ms, sorted.
func (w *writer) latencies() []float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := slices.Clone(w.lat)
	slices.Sort(s)
	return s
}

func (w *writer) committedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed)
}

// committedOnTarget checks that the target holds exactly the writes that committed on the source.
func (w *writer) committedOnTarget(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	w.mu.Lock()
	want, sum := int64(len(w.committed)), int64(0)
	for _, id := range w.committed {
		sum += id
	}
	w.mu.Unlock()
	var n, got int64
	var intact bool
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(id), 0)::bigint, coalesce(bool_and(payload = md5(id::text)), true)
		FROM bench_move.writes`).Scan(&n, &got, &intact); err != nil {
		return err
	}
	if n != want || got != sum || !intact {
		return fmt.Errorf("the target holds %d writes (id sum %d, intact %v); %d committed on the source (id sum %d)", n, got, intact, want, sum)
	}
	return nil
}
