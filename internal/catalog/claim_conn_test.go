package catalog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// claimBackend is the backend of the connection kept for claims (0: none kept).
func claimBackend(c *Catalog) uint32 {
	k := &c.claimConn
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		return 0
	}
	return k.conn.Conn().PgConn().PID()
}

// Claims run on one connection of the pool whatever else takes connections between them (the
// catalog plans a statement once per connection); one that sat idle too long goes back to the
// pool, as does one the catalog dropped, and the next claim takes a working one; Close does not
// wait for the kept connection.
func TestClaimsKeepOneConnection(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
	now := time.Now()
	cat.Now = func() time.Time { return now }
	execAll(t, cat.Pool, `INSERT INTO deckhand.worker (id, name, concurrency, lease_expires_at) VALUES (1, 'w', 10, 'infinity')`)
	claim := func() {
		t.Helper()
		if _, err := cat.Claim(ctx, 1, 4); err != nil {
			t.Fatalf("claim: %v", err)
		}
	}
	// Other users of the pool hold and hand back connections between the claims, the most
	// recently released first, as the pool hands them out.
	churn := func() {
		t.Helper()
		var held []*pgxpool.Conn
		for range 4 {
			conn, err := cat.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, conn)
		}
		for _, conn := range held {
			conn.Release()
		}
	}

	claim()
	first := claimBackend(cat)
	if first == 0 {
		t.Fatal("no connection kept after a claim")
	}
	for range 5 {
		churn()
		claim()
		if got := claimBackend(cat); got != first {
			t.Fatalf("a claim ran on backend %d, the one before on %d", got, first)
		}
	}

	// Idle past claimConnIdle: back to the pool, which checks it before handing one out.
	now = now.Add(claimConnIdle + time.Second)
	churn()
	claim()
	if claimBackend(cat) == 0 {
		t.Fatal("no connection kept after the idle one went back")
	}

	// The catalog drops the kept connection: the claim on it fails, the next takes another.
	dropped := claimBackend(cat)
	execAll(t, cat.Pool, fmt.Sprintf(`SELECT pg_terminate_backend(%d)`, dropped))
	if _, err := cat.Claim(ctx, 1, 4); err == nil {
		t.Log("the claim on the dropped connection did not fail (the pool may have noticed first)")
	}
	claim()
	if got := claimBackend(cat); got == dropped || got == 0 {
		t.Fatalf("claims run on backend %d after %d was terminated", got, dropped)
	}

	closed := make(chan struct{})
	go func() { cat.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeTimeout / 2):
		t.Fatal("Close waited for the connection kept for claims")
	}
}

// A completion that claims nothing (the worker is full) runs on the connection kept for claims
// too: its statement is the one completions that claim run there, and is prepared on it
// rather than on another connection of the pool.
func TestCompletionsWithoutAClaimUseTheKeptConnection(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
	execAll(t, cat.Pool, `INSERT INTO deckhand.worker (id, name, concurrency, lease_expires_at) VALUES (1, 'w', 10, 'infinity')`,
		`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('one', 'noop', 1) RETURNING id)
		 INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
		 SELECT j.id, 'only', 'noop', 'app', 3, '1 hour', 'runnable' FROM j`)
	claimed, err := cat.Claim(ctx, 1, 4)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d tasks, %v", len(claimed), err)
	}
	kept := claimBackend(cat)
	prepared := func() (n int) {
		t.Helper()
		k := &cat.claimConn
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.conn == nil {
			t.Fatal("no connection kept")
		}
		if err := k.conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_prepared_statements
			WHERE (statement LIKE '%deckhand.settle_ended%' OR statement LIKE '%held AS MATERIALIZED%')
			  AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := prepared(); n != 0 {
		t.Fatalf("%d completion statements prepared before any completion", n)
	}
	if _, err := cat.Complete(ctx, []Result{{TaskID: claimed[0].ID, Token: claimed[0].Token, WorkerID: 1,
		Outcome: deckhandtype.OutcomeDone}}); err != nil {
		t.Fatal(err)
	}
	if got := claimBackend(cat); got != kept {
		t.Fatalf("the kept connection changed from backend %d to %d", kept, got)
	}
	// The completion statement and the settling that follows it.
	if n := prepared(); n != 2 {
		t.Errorf("%d completion statements prepared on the kept connection, want 2", n)
	}
}
