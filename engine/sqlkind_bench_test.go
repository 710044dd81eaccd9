package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// BenchmarkSQLTaskNodeSide measures the node's half of a `SELECT 1` SQL task alone, with no
// catalog: 16 sessions (a node's max_tasks in `deckhand bench`) run the SQL executor as a
// worker does, with the owner's check, the set-up, the statement, the read of its transaction
// id, and COMMIT with the session's reset (two round trips). Beside it, "bare" runs `BEGIN`,
// `SELECT 1` and `COMMIT` in three round trips through a plain pgx pool on the same server.
// The difference is what running as the owner in a clean session costs. Each reports tasks/s:
//
//	go test ./engine -run '^$' -bench SQLTaskNodeSide -benchtime 20000x
func BenchmarkSQLTaskNodeSide(b *testing.B) {
	const sessions = 16
	cl := pgtest.Shared(b)
	db := pgtest.NewDatabase(b)
	dsn := cl.DSN(db, pgcluster.Superuser)
	node := "bench"

	b.Run("deckhand", func(b *testing.B) {
		pools := nodeconn.NewPools(sessions)
		defer pools.Close()
		ex := sqlExecutor{pools: pools}
		var seq atomic.Int64
		runSessions(b, sessions, func(ctx context.Context) error {
			id := seq.Add(1)
			return ex.Run(ctx, &deckhandtype.ClaimedTask{ID: id, Token: 1, Node: &node, NodeDSN: &dsn,
				Owner: pgcluster.Superuser, SubmittedBy: pgcluster.Superuser, Kind: "sql", SQL: "SELECT 1",
				InTransaction: true, TimeoutMS: time.Minute.Milliseconds()})
		})
	})
	b.Run("bare", func(b *testing.B) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = sessions
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		runSessions(b, sessions, func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			for _, sql := range []string{"BEGIN", "SELECT 1", "COMMIT"} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// runSessions runs task b.N times over n goroutines and reports the rate as tasks/s.
func runSessions(b *testing.B, n int, task func(context.Context) error) {
	ctx := context.Background()
	var (
		left  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	began := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := task(ctx); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if err := first.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
}
