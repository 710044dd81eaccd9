package catalog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
