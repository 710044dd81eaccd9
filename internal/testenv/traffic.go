package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// Traffic is what runs against a node while a drop is pending: a long SELECT on the table,
// readers of the table and writers into another table, each statement timed.
type Traffic struct {
	selectEnded time.Time // when the long SELECT ended, by the server's clock
	dropped     time.Time // when the table was first seen gone, by the server's clock
	maxRead     time.Duration
	maxWrite    time.Duration
	reads       int
	writes      int
}

// WithTraffic runs traffic in database db of cluster c while a drop of table is pending: it
// starts the long SELECT (hold long) on table, readers of it and writers into sink, then calls
// during, which asks for the drop; it returns once the table is gone (or fails the test after
// a minute).
func WithTraffic(t testing.TB, c *pgcluster.Cluster, db, table, sink string, hold time.Duration, during func()) *Traffic {
	t.Helper()
	ctx := context.Background()
	tr := &Traffic{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	long := pgtest.Connect(t, c.DSN(db, pgcluster.Superuser))
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(started)
		// When the SELECT ended, by the server's clock: read on this side, it would be as late
		// as this goroutine is scheduled, which under load came after the drop was seen.
		var ended time.Time
		var slept string
		var n int64
		err := long.QueryRow(ctx, `SELECT pg_sleep($1)::text, count(*), clock_timestamp() FROM `+table, hold.Seconds()).Scan(&slept, &n, &ended)
		mu.Lock()
		tr.selectEnded = ended
		mu.Unlock()
		if err != nil {
			t.Errorf("long SELECT: %v", err)
		}
	}()
	<-started
	// The SELECT must hold its lock before the drop is asked for.
	probe := pgtest.Connect(t, c.DSN(db, pgcluster.Superuser))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var holding bool
		if err := probe.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass($1) AND granted)`, table).Scan(&holding); err != nil {
			t.Fatal(err)
		}
		if holding {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long SELECT never took its lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Each statement reports how long it took on the server, lock waits included: the bound
	// is about the server making sessions queue, not about this machine's scheduling under
	// the race detector.
	loop := func(sql string, longest *time.Duration, n *int) {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, c.DSN(db, pgcluster.Superuser))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for {
			select {
			case <-stop:
				return
			default:
			}
			var took time.Duration
			// One simple-protocol message: statement_timestamp() is when the server received
			// it, before any lock was waited for.
			err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&took)
			if err != nil {
				return // the table is gone
			}
			mu.Lock()
			*longest = max(*longest, took)
			*n++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}
	wg.Add(2)
	go loop(`SELECT clock_timestamp() - statement_timestamp() FROM (SELECT count(*) FROM `+table+`) c`, &tr.maxRead, &tr.reads)
	go loop(`INSERT INTO `+sink+` VALUES (1) RETURNING clock_timestamp() - statement_timestamp()`, &tr.maxWrite, &tr.writes)

	during()
	deadline = time.Now().Add(time.Minute)
	for {
		var gone bool
		var at time.Time
		if err := probe.QueryRow(ctx, `SELECT to_regclass($1) IS NULL, clock_timestamp()`, table).Scan(&gone, &at); err != nil {
			t.Fatal(err)
		}
		if gone {
			tr.dropped = at // by the server's clock, as selectEnded
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the table was never dropped")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return tr
}

// margin is what a statement may take on the server beyond the lock timeout on a loaded test machine.
const margin = 150 * time.Millisecond

// Check fails the test unless the drop came within a second of the long SELECT ending, never
// before, and no read or write waited longer than lockTimeout (plus a margin).
func (tr *Traffic) Check(t testing.TB, lockTimeout time.Duration) {
	t.Helper()
	after := tr.dropped.Sub(tr.selectEnded)
	t.Logf("dropped %s after the long SELECT ended; longest read %s (%d reads), longest write %s (%d writes); lock timeout %s",
		after, tr.maxRead, tr.reads, tr.maxWrite, tr.writes, lockTimeout)
	if tr.dropped.Before(tr.selectEnded) {
		t.Errorf("the table was dropped %s before the SELECT using it ended", -after)
	}
	// The drop comes within about a second of the query's end (bench cleanup measures the
	// delay); the bound leaves room for a machine loaded by other tests.
	if after > 3*time.Second {
		t.Errorf("the drop came %s after the last query ended, want within seconds", after)
	}
	if tr.maxRead > lockTimeout+margin || tr.maxWrite > lockTimeout+margin {
		t.Errorf("a statement waited %s (read) / %s (write), more than the lock timeout %s (+%s)", tr.maxRead, tr.maxWrite, lockTimeout, margin)
	}
	if tr.reads < 20 || tr.writes < 20 {
		t.Errorf("too little traffic to tell: %d reads, %d writes", tr.reads, tr.writes)
	}
}
