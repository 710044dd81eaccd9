package catalog

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker's claims and completions (with a claim or without) run on one connection of the pool,
// kept between them, rather than on whichever the pool hands out. The catalog plans a
// statement once per connection (plan_cache_mode force_generic_plan), and again on each after
// an invalidation (an ANALYZE of the task table, say); the claim statements are the costliest
// to plan (the walk over the nodes about 2.3 ms on an idle server, 5 ms on a connection's
// first statements, 18–40 ms a plan under load, measured), and a worker's claims spread over
// the pool's connections (heartbeats, the leader's rounds and completions take connections
// meanwhile) planned each statement on every one of them: 15–19 plans of the walk in a run of
// about 3,000 claims by 8 workers with no invalidation (autovacuum off), 8 with one connection
// each (docs/benchmarks.md).
//
// Claims of one worker take turns (its claim lock), so one connection serves them; a claim that
// finds it in use (another caller of the same Catalog) takes any connection of the pool, as
// every claim did. A kept connection idle for longer than claimConnIdle goes back to the pool,
// which checks a connection idle that long before it hands it out again; so does one whose
// claim failed.

// claimConnIdle is how long the claim connection may sit unused before it goes back to the pool.
const claimConnIdle = time.Second

// claimConn is the connection kept for claims.
type claimConn struct {
	mu       sync.Mutex
	conn     *pgxpool.Conn // nil: none kept
	lastUsed time.Time
	closed   bool
}

// acquireForClaim returns a connection for a claim transaction and what gives it back: with
// ok false (the claim failed) a kept connection goes back to the pool.
func (c *Catalog) acquireForClaim(ctx context.Context) (*pgxpool.Conn, func(ok bool), error) {
	k := &c.claimConn
	if !k.mu.TryLock() {
		return c.acquireFromPool(ctx)
	}
	if k.closed {
		k.mu.Unlock()
		return c.acquireFromPool(ctx)
	}
	if k.conn != nil && c.clock().Sub(k.lastUsed) > claimConnIdle {
		k.conn.Release()
		k.conn = nil
	}
	if k.conn == nil {
		conn, err := c.Pool.Acquire(ctx)
		if err != nil {
			k.mu.Unlock()
			return nil, nil, err
		}
		k.conn = conn
	}
	return k.conn, func(ok bool) {
		if ok {
			k.lastUsed = c.clock()
		} else {
			k.conn.Release()
			k.conn = nil
		}
		k.mu.Unlock()
	}, nil
}

func (c *Catalog) acquireFromPool(ctx context.Context) (*pgxpool.Conn, func(bool), error) {
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn, func(bool) { conn.Release() }, nil
}

// releaseClaimConn gives the kept connection back to the pool for good, waiting for a claim
// that uses it: the pool's Close waits for every connection handed out.
func (c *Catalog) releaseClaimConn() {
	k := &c.claimConn
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.conn != nil {
		k.conn.Release()
		k.conn = nil
	}
}
