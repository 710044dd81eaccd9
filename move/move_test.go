package move_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// appSchema is the schema the tests move: five tables with a sequence, a foreign key, an
// index, a partitioned table and a jsonb column, owned by the move's owner.
const appSchema = `
	CREATE SCHEMA app;
	CREATE SEQUENCE app.order_ids;
	CREATE TABLE app.customers (id bigserial PRIMARY KEY, name text NOT NULL);
	CREATE TABLE app.orders (id bigint PRIMARY KEY DEFAULT nextval('app.order_ids'),
		customer_id bigint NOT NULL REFERENCES app.customers (id), doc jsonb NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now());
	CREATE INDEX orders_customer_idx ON app.orders (customer_id);
	CREATE TABLE app.events (id bigint NOT NULL, kind text, payload jsonb, PRIMARY KEY (id)) PARTITION BY RANGE (id);
	CREATE TABLE app.events_low PARTITION OF app.events FOR VALUES FROM (0) TO (1000000);
	CREATE TABLE app.events_high PARTITION OF app.events FOR VALUES FROM (1000000) TO (MAXVALUE);
	CREATE TABLE app.counters (k text PRIMARY KEY, v bigint NOT NULL);
	CREATE TABLE app.notes (id int PRIMARY KEY, body text);
	INSERT INTO app.customers (name) SELECT 'customer ' || g FROM generate_series(1, 50) g;
	INSERT INTO app.orders (customer_id, doc) SELECT 1 + g % 50, jsonb_build_object('n', g, 'tags', jsonb_build_array('a', g % 7))
		FROM generate_series(1, 3000) g;
	INSERT INTO app.events SELECT g * 997, 'k' || g % 5, jsonb_build_object('g', g) FROM generate_series(0, 3000) g;
	INSERT INTO app.counters VALUES ('hits', 0), ('misses', 0);
	INSERT INTO app.notes SELECT g, repeat('note ', g % 20) FROM generate_series(1, 200) g;`

var appTables = []string{"app.customers", "app.orders", "app.events", "app.counters", "app.notes"}

// writer writes to the source at a steady rate, as an application would, and records what
// committed and how long each write took, until a write fails because the tables moved.
type writer struct {
	conn *pgx.Conn

	mu       sync.Mutex
	orders   map[int64]string // id -> doc, of the orders that committed
	events   map[int64]bool
	hits     int64
	writes   int
	longest  time.Duration
	movedErr error // the loud failure of a write after the cut-over
	other    error // any other failure
}

func (w *writer) run(stop <-chan struct{}, interval time.Duration) {
	rng := rand.New(rand.NewPCG(1, 2))
	next := int64(5_000_000)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		start := time.Now()
		var err error
		var commit func()
		switch i % 4 {
		case 0:
			doc := fmt.Sprintf(`{"w": %d}`, i)
			var id int64
			err = w.conn.QueryRow(ctx, `INSERT INTO app.orders (customer_id, doc) VALUES ($1, $2) RETURNING id`, 1+i%50, doc).Scan(&id)
			commit = func() { w.orders[id] = doc }
		case 1:
			id := w.someOrder(rng)
			doc := fmt.Sprintf(`{"u": %d}`, i)
			_, err = w.conn.Exec(ctx, `UPDATE app.orders SET doc = $2 WHERE id = $1`, id, doc)
			commit = func() { w.orders[id] = doc }
		case 2:
			id := w.someOrder(rng)
			_, err = w.conn.Exec(ctx, `DELETE FROM app.orders WHERE id = $1`, id)
			commit = func() { delete(w.orders, id) }
		case 3:
			next++
			id := next
			_, err = w.conn.Exec(ctx, `WITH e AS (INSERT INTO app.events VALUES ($1, 'w', '{"w": true}'))
				UPDATE app.counters SET v = v + 1 WHERE k = 'hits'`, id)
			commit = func() { w.events[id] = true; w.hits++ }
		}
		took := time.Since(start)
		w.mu.Lock()
		w.longest = max(w.longest, took)
		if err == nil {
			w.writes++
			commit()
		} else if strings.Contains(err.Error(), "moved to group") {
			w.movedErr = err
		} else {
			w.other = err
		}
		done := err != nil
		w.mu.Unlock()
		if done {
			return
		}
	}
}

func (w *writer) someOrder(rng *rand.Rand) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.orders {
		if rng.IntN(4) == 0 {
			return id
		}
	}
	for id := range w.orders {
		return id
	}
	return 0
}

// An online move of a schema under a steady writer: the target ends with exactly the rows the
// source had at the cut-over, every committed write among them; the writer was never blocked
// for longer than --max-write-block; a write to the old location fails loudly; the source
// stays while a reader uses it and is dropped once it ends. The owner is not a superuser.
func TestOnlineMoveUnderWrites(t *testing.T) {
	// 2s, the default; 300ms, shorter than the catch-up under the locks often takes here, so
	// that the cut-over rolls back and tries again until it fits.
	// And 2s with the catch-up's connections lost — its replication connection as it starts,
	// its target session in the middle of applying — which it resumes, in the same attempt.
	for _, tc := range []struct {
		budget time.Duration
		lossy  bool
	}{{2 * time.Second, false}, {300 * time.Millisecond, false}, {2 * time.Second, true}} {
		name := tc.budget.String()
		if tc.lossy {
			name += "/lost-connections"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			onlineMoveUnderWrites(t, tc.budget, tc.lossy)
		})
	}
}

func onlineMoveUnderWrites(t *testing.T, budget time.Duration, lossy bool) {
	e := newMoveEnv(t)
	if lossy {
		e.Proxy.AddRule(pgtest.Rule{Name: "repl", Match: regexp.MustCompile(`^START_REPLICATION`), Action: pgtest.ActionDrop, Times: 1})
		e.Proxy.AddRule(pgtest.Rule{Name: "apply", Match: regexp.MustCompile(`^INSERT INTO "app"\."orders"`), Action: pgtest.ActionDrop, Times: 1})
		defer func() {
			if e.Proxy.Hits("repl") != 1 || e.Proxy.Hits("apply") != 1 {
				t.Errorf("connections lost: replication %d, applier %d; want 1 each", e.Proxy.Hits("repl"), e.Proxy.Hits("apply"))
			}
		}()
	}
	e.asOwner(e.src, appSchema)
	var super, repl bool
	if err := e.NodeConn(e.src, pgcluster.Superuser).QueryRow(ctx, `SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = $1`, e.owner).
		Scan(&super, &repl); err != nil || super || !repl {
		t.Fatalf("the owner: superuser %v, replication %v (%v); want a non-superuser with REPLICATION", super, repl, err)
	}
	// The owner needs its password, which only the pgpass file holds.
	cfg, err := pgx.ParseConfig(e.NodeCluster.DSN(e.src, e.owner))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = ""
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
		t.Fatal("the owner logged in without its password: the test would not show that the move finds it in pgpass")
	} else if !strings.Contains(err.Error(), "password") {
		t.Fatalf("the owner's login without a password: %v", err)
	}
	w := &writer{conn: e.NodeConn(e.src, e.owner), orders: map[int64]string{}, events: map[int64]bool{}}
	{
		rows, _ := w.conn.Query(ctx, `SELECT id, doc::text FROM app.orders`)
		var id int64
		var doc string
		if _, err := pgx.ForEachRow(rows, []any{&id, &doc}, func() error { w.orders[id] = doc; return nil }); err != nil {
			t.Fatal(err)
		}
		// Docs compare in their text form as the server prints them.
	}
	// A reader in a long transaction on the source: it does not hold up the cut-over (EXCLUSIVE
	// locks let readers through) but keeps the source from being dropped.
	reader := e.NodeConn(e.src, pgcluster.Superuser)
	if _, err := reader.Exec(ctx, `BEGIN; SELECT count(*) FROM app.notes`); err != nil {
		t.Fatal(err)
	}

	// On a loaded machine a short budget may take many tries before one fits: the attempt gets
	// as many as fit in the job's time (each still blocks writers for at most the budget,
	// which is what is checked below).
	tries, within := 0, 2*time.Minute
	if budget < time.Second {
		tries, within = 1000, 5*time.Minute
	}
	e.worker(move.Mover{CutOverTries: tries})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.run(stop, 5*time.Millisecond) }()
	time.Sleep(300 * time.Millisecond) // writes before the move starts
	task, err := move.Request{Schema: "app", From: "g1", To: "g2", MaxWriteBlock: budget, Owner: e.owner}.Task("move")
	if err != nil {
		t.Fatal(err)
	}
	task.MaxAttempts, task.Timeout = 1, spec.Duration(within)
	id := e.Submit(jobOf(task))
	job := e.Wait(id, within+10*time.Second)
	if job.State != deckhandtype.JobFinished {
		close(stop)
		wg.Wait()
		t.Fatalf("move %s: %s", job.State, e.lastError(id))
	}
	// The writer stops at its first write after the cut-over, which must fail loudly.
	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(10 * time.Second):
		close(stop)
		wg.Wait()
		t.Fatal("the writer kept writing to the source after the move")
	}
	if w.other != nil {
		t.Fatalf("a write failed other than loudly for the move: %v", w.other)
	}
	wantMsg := fmt.Sprintf("moved to group g2 by job %d", id)
	var pgErr *pgconn.PgError
	if !errors.As(w.movedErr, &pgErr) || !strings.Contains(pgErr.Message, wantMsg) || pgErr.Code != "25006" {
		t.Errorf("the write after the cut-over failed with %v, want %q (SQLSTATE 25006)", w.movedErr, wantMsg)
	}
	t.Logf("writer: %d writes committed, longest took %s (budget %s)", w.writes, w.longest, budget)
	progress, ok, err := e.Client.Catalog().MoveProgress(ctx, mustTask(t, e, id))
	if err != nil || !ok || progress.LongestWriteBlockMS == nil {
		t.Fatalf("move progress: %+v %v %v", progress, ok, err)
	}
	t.Logf("move: writes blocked %dms, step %s, %d rows copied", *progress.LongestWriteBlockMS, progress.Step, progress.RowsCopied)
	// The block itself is bounded by the move, from its lock request to its commit, and it
	// reports it: that must be within the budget. The writer's own measure adds its round trip
	// and the scheduling of a loaded 2-CPU test machine: 400ms of margin.
	if margin := 400 * time.Millisecond; w.longest > budget+margin || time.Duration(*progress.LongestWriteBlockMS)*time.Millisecond > budget {
		t.Errorf("writes were blocked for %s (move: %dms), more than --max-write-block %s + %s", w.longest, *progress.LongestWriteBlockMS, budget, margin)
	}

	// The source, now frozen, and the target hold the same rows.
	srcSums, dstSums := e.checksums(e.src, appTables...), e.checksums(e.dst, appTables...)
	for _, tbl := range appTables {
		if srcSums[tbl] != dstSums[tbl] {
			t.Errorf("%s differs: source %s, target %s", tbl, srcSums[tbl], dstSums[tbl])
		}
	}
	// Every write that committed is on the target.
	dst := e.NodeConn(e.dst, pgcluster.Superuser)
	rows, _ := dst.Query(ctx, `SELECT id, doc::text FROM app.orders`)
	got := map[int64]string{}
	var oid int64
	var doc string
	if _, err := pgx.ForEachRow(rows, []any{&oid, &doc}, func() error { got[oid] = doc; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(w.orders) {
		t.Errorf("target has %d orders, the writer committed %d", len(got), len(w.orders))
	}
	for id, doc := range w.orders {
		if normalizeJSON(got[id]) != normalizeJSON(doc) {
			t.Errorf("order %d: target %q, committed %q", id, got[id], doc)
			break
		}
	}
	var hits, events int64
	if err := dst.QueryRow(ctx, `SELECT (SELECT v FROM app.counters WHERE k = 'hits'), (SELECT count(*) FROM app.events WHERE id > 5000000)`).
		Scan(&hits, &events); err != nil || hits != w.hits || events != int64(len(w.events)) {
		t.Errorf("target: hits %d events %d (%v), committed %d and %d", hits, events, err, w.hits, len(w.events))
	}
	// The target is complete: the index, a valid foreign key, sequences past the source's.
	var index, fkValid bool
	var seqOK bool
	if err := dst.QueryRow(ctx, `SELECT to_regclass('app.orders_customer_idx') IS NOT NULL,
		(SELECT convalidated FROM pg_constraint WHERE conrelid = 'app.orders'::regclass AND contype = 'f'),
		(SELECT last_value FROM app.order_ids) >= (SELECT max(id) FROM app.orders)`).Scan(&index, &fkValid, &seqOK); err != nil ||
		!index || !fkValid || !seqOK {
		t.Errorf("target: index %v, foreign key valid %v, sequence past the ids %v (%v)", index, fkValid, seqOK, err)
	}
	var newID int64
	if err := e.NodeConn(e.dst, e.owner).QueryRow(ctx, `INSERT INTO app.orders (customer_id, doc) VALUES (1, '{}') RETURNING id`).Scan(&newID); err != nil {
		t.Errorf("a write on the target: %v", err)
	}
	// A stale writer on the old location fails loudly, whatever it writes.
	stale := e.NodeConn(e.src, e.owner)
	for _, stmt := range []string{`INSERT INTO app.notes VALUES (100000, 'late')`, `DELETE FROM app.events_low WHERE id = 0`, `TRUNCATE app.counters`} {
		if _, err := stale.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "moved to group g2") {
			t.Errorf("%s on the source: %v, want a refusal", stmt, err)
		}
	}
	// The source stays while the reader uses it, and goes once it is done.
	time.Sleep(time.Second)
	if !e.schemaExists(e.src, "app") {
		t.Fatal("the source schema was dropped while a reader used it")
	}
	if _, err := reader.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return !e.schemaExists(e.src, "app") }, "the source schema dropped")
	if e.schemaExists(e.dst, "deckhand_move") {
		t.Error("scratch left on the target")
	}
	// The cleaner records a removal right after it, in the catalog: the schema may be gone a
	// moment before its record says so.
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = left[:0]
		for _, r := range e.Records(id) {
			if r.State != deckhandtype.CleanupRemoved && r.State != deckhandtype.CleanupForgotten {
				left = append(left, fmt.Sprintf("record %s %s: %s", r.Type, r.Resource().Display(), r.State))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Error(l)
	}
	noReplicationLeft(t, e)
	placements, err := e.Client.Catalog().Placements(ctx)
	if err != nil || len(placements) == 0 || placements[0].Group != "g2" {
		t.Errorf("placements: %+v (%v)", placements, err)
	}
}

func normalizeJSON(s string) string { return strings.ReplaceAll(s, " ", "") }

func mustTask(t testing.TB, e *moveEnv, jobID int64) int64 {
	d, err := e.Client.Job(ctx, jobID)
	if err != nil || len(d.Tasks) == 0 {
		t.Fatalf("job %d: %v", jobID, err)
	}
	return d.Tasks[0].ID
}

// noReplicationLeft checks that no slot or publication of a move is left on the source.
func noReplicationLeft(t *testing.T, e *moveEnv) {
	t.Helper()
	conn := e.NodeConn(e.src, pgcluster.Superuser)
	var n int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d publications and slots left on the source (%v)", n, err)
	}
}

// A move of some tables: a partitioned one with its partitions and a plain one go, the rest
// of their schema stays; the target gets the schema it lacked.
func TestMoveTables(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	moved := []string{"app.events", "app.notes"}
	sums := e.checksums(e.src, moved...)
	e.worker(move.Mover{})
	// A table without a schema is in public, where there is none: the task refuses it.
	id, err := move.Start(ctx, e.Client, move.Request{Tables: []string{"app.events", "notes"}, From: "g1", To: "g2", Owner: e.owner})
	if err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, time.Minute); job.State != deckhandtype.JobFailed || !strings.Contains(e.lastError(id), "table public.notes does not exist on the source") {
		t.Fatalf("move of a missing table: %s: %s", job.State, e.lastError(id))
	}
	id, err = move.Start(ctx, e.Client, move.Request{Tables: []string{"app.events", "app.notes"}, From: "g1", To: "g2", Owner: e.owner})
	if err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move %s: %s", job.State, e.lastError(id))
	}
	got := e.checksums(e.dst, moved...)
	for _, tbl := range moved {
		if got[tbl] != sums[tbl] {
			t.Errorf("%s differs on the target", tbl)
		}
	}
	e.cleanupRun()
	for _, tbl := range moved {
		if e.TableExists(e.src, tbl) {
			t.Errorf("%s is still on the source", tbl)
		}
	}
	for _, tbl := range []string{"app.orders", "app.customers", "app.counters"} {
		if !e.TableExists(e.src, tbl) || e.TableExists(e.dst, tbl) {
			t.Errorf("%s moved, or left the source", tbl)
		}
	}
	if !e.TableExists(e.dst, "app.events_high") {
		t.Error("the partitions did not move with their table")
	}
	noReplicationLeft(t, e)
}

// The moved source schema is not dropped while a table of it is pinned (by an export reading
// it, say): its deferred drop waits for the pin to go.
func TestMovedSchemaWaitsForPins(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	pin, err := e.Client.Pin(ctx, deckhandtype.CleanupResource{Type: deckhandtype.ResourceTable, Node: "src", Location: "app", Name: "notes"}, "a reader")
	if err != nil {
		t.Fatal(err)
	}
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move %s: %s", job.State, e.lastError(id))
	}
	e.cleanupRun()
	if !e.schemaExists(e.src, "app") {
		t.Fatal("the source schema was dropped although a table of it is pinned")
	}
	if err := e.Client.Unpin(ctx, pin); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return !e.schemaExists(e.src, "app") }, "the source schema dropped once unpinned")
}
