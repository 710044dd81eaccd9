package pgtest_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestProxyPassesThrough(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	c := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	p := pgtest.ProxyTo(t, c)

	// sslmode=prefer makes pgx ask for TLS first; the proxy must refuse and carry on.
	conn := pgtest.Connect(t, strings.Replace(p.DSN(db, pgcluster.Superuser), "sslmode=disable", "sslmode=prefer", 1))
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int, body text)"); err != nil {
		t.Fatal(err)
	}
	// Large enough to span many reads and writes in both directions.
	big := strings.Repeat("x", 200_000)
	if _, err := conn.Exec(ctx, "INSERT INTO t SELECT g, $1 FROM generate_series(1, 20) g", big); err != nil {
		t.Fatal(err)
	}
	var n, total int
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(length(body)) FROM t").Scan(&n, &total); err != nil {
		t.Fatal(err)
	}
	if n != 20 || total != 20*len(big) {
		t.Fatalf("count %d total %d", n, total)
	}
	rows, err := conn.Query(ctx, "SELECT body FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(bodies) != 20 || bodies[19] != big {
		t.Fatalf("%d rows, %v", len(bodies), err)
	}
	// A pipeline of several statements under one Sync goes through untouched.
	b := &pgx.Batch{}
	for i := range 5 {
		b.Queue("SELECT $1::int", i)
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
}

func TestProxyErrorSimpleAndExtended(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	c := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	p := pgtest.ProxyTo(t, c)
	if err := c.Exec(ctx, db, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	remove := p.AddRule(pgtest.Rule{
		Name:    "boom",
		Match:   regexp.MustCompile(`(?i)^insert into t`),
		Action:  pgtest.ActionError,
		Code:    "40001",
		Message: "it's injected \\ really",
	})
	defer remove()
	conn := pgtest.Connect(t, p.DSN(db, pgcluster.Superuser))

	// Without arguments pgx uses the simple protocol ('Q').
	_, err := conn.Exec(ctx, "INSERT INTO t VALUES (1)")
	if code := pgCode(err); code != "40001" || !strings.Contains(err.Error(), `it's injected \ really`) {
		t.Fatalf("simple protocol: %v (code %q)", err, code)
	}
	// With arguments it uses Parse/Describe/Sync, then Bind/Execute/Sync.
	_, err = conn.Exec(ctx, "INSERT INTO t VALUES ($1)", 2)
	if code := pgCode(err); code != "40001" {
		t.Fatalf("extended protocol: %v", err)
	}
	if got := p.Hits("boom"); got != 2 {
		t.Fatalf("hits %d, want 2", got)
	}
	// The connection is still good, and nothing was inserted.
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v > $1", 0).Scan(&n); err != nil || n != 0 {
		t.Fatalf("count %d, %v", n, err)
	}

	// Inside a transaction block the injected error aborts the block, as a real one would.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", 3); pgCode(err) != "40001" {
		t.Fatalf("in transaction: %v", err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); pgCode(err) != "25P02" {
		t.Fatalf("after injected error in transaction: %v, want 25P02", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// In a pipeline the failure rolls back the statements before it under the same Sync.
	b := &pgx.Batch{}
	b.Queue("WITH x AS (SELECT 1) INSERT INTO t VALUES ($1)", 4) // not matched
	b.Queue("INSERT INTO t VALUES ($1)", 5)
	b.Queue("SELECT $1::int", 6)
	err = conn.SendBatch(ctx, b).Close()
	if pgCode(err) != "40001" {
		t.Fatalf("batch: %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after failed batch: count %d, %v", n, err)
	}

	remove()
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", 7); err != nil {
		t.Fatalf("after removing the rule: %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count %d, %v", n, err)
	}
}

func TestProxyErrorTimes(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	p := pgtest.ProxyTo(t, pgtest.Shared(t))
	p.AddRule(pgtest.Rule{Name: "once", Action: pgtest.ActionError, Code: "57P01", Times: 1})
	conn := pgtest.Connect(t, p.DSN("postgres", pgcluster.Superuser))
	if _, err := conn.Exec(ctx, "SELECT 1"); pgCode(err) != "57P01" {
		t.Fatalf("first: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("second: %v", err)
	}
	if p.Hits("once") != 1 {
		t.Fatalf("hits %d", p.Hits("once"))
	}
}

func TestProxyDrop(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	p := pgtest.ProxyTo(t, pgtest.Shared(t))
	remove := p.AddRule(pgtest.Rule{Name: "drop", Match: regexp.MustCompile(`pg_sleep`), Action: pgtest.ActionDrop})
	conn := pgtest.Connect(t, p.DSN("postgres", pgcluster.Superuser))
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(0)"); err == nil {
		t.Fatal("query survived the drop")
	}
	if !conn.IsClosed() {
		t.Fatal("connection not closed after drop")
	}
	if p.Hits("drop") != 1 {
		t.Fatalf("hits %d", p.Hits("drop"))
	}
	remove()

	conn2 := pgtest.Connect(t, p.DSN("postgres", pgcluster.Superuser))
	if _, err := conn2.Exec(ctx, "SELECT pg_sleep(0)"); err != nil {
		t.Fatal(err)
	}
	p.DropAll()
	if err := conn2.Ping(ctx); err == nil {
		t.Fatal("connection survived DropAll")
	}
}

func TestProxyDropAfterBytes(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	p := pgtest.ProxyTo(t, pgtest.Shared(t))
	p.AddRule(pgtest.Rule{Name: "bytes", AfterBytes: 4000, Action: pgtest.ActionDrop})
	conn := pgtest.Connect(t, p.DSN("postgres", pgcluster.Superuser))
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("small query under the limit: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT length($1)", strings.Repeat("y", 10_000)); err == nil {
		t.Fatal("query crossing AfterBytes survived")
	}
	if p.Hits("bytes") != 1 {
		t.Fatalf("hits %d", p.Hits("bytes"))
	}
}

func TestProxyStall(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	p := pgtest.ProxyTo(t, pgtest.Shared(t))
	dsn := p.DSN("postgres", pgcluster.Superuser)

	remove := p.AddRule(pgtest.Rule{Name: "stall", Match: regexp.MustCompile(`stall me`), Action: pgtest.ActionStall})
	conn := pgtest.Connect(t, dsn)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := conn.Exec(short, "SELECT 'stall me'")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled query: %v, want deadline exceeded", err)
	}
	// Other statements on other connections are not held.
	if _, err := pgtest.Connect(t, dsn).Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	remove()
	if _, err := pgtest.Connect(t, dsn).Exec(ctx, "SELECT 'stall me'"); err != nil {
		t.Fatalf("after removing the stall rule: %v", err)
	}

	// A stall rule that is lifted lets the held statement finish.
	remove = p.AddRule(pgtest.Rule{Name: "held", Match: regexp.MustCompile(`held`), Action: pgtest.ActionStall})
	held := pgtest.Connect(t, dsn)
	done := make(chan error, 1)
	go func() {
		var s string
		done <- held.QueryRow(ctx, "SELECT 'held'").Scan(&s)
	}()
	waitFor(t, func() bool { return p.Hits("held") == 1 })
	select {
	case err := <-done:
		t.Fatalf("held query finished while stalled: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	remove()
	if err := <-done; err != nil {
		t.Fatalf("held query after lifting the stall: %v", err)
	}

	// The global stall holds everything, new connections included.
	p.Stall(true)
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = pgx.Connect(short, dsn)
	cancel()
	if err == nil {
		t.Fatal("connected through a stalled proxy")
	}
	p.Stall(false)
	if _, err := pgtest.Connect(t, dsn).Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after unstalling: %v", err)
	}
}

func TestProxyCloseReleasesStalls(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	p, err := pgtest.NewProxy(pgtest.Shared(t).Addr())
	if err != nil {
		t.Fatal(err)
	}
	p.Stall(true)
	done := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, p.DSN("postgres", pgcluster.Superuser))
		if err == nil {
			conn.Close(ctx)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on a stalled connection")
	}
	if err := <-done; err == nil {
		t.Fatal("connected through a closed proxy")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
