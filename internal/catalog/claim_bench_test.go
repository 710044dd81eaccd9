package catalog_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// BenchmarkClaimOverManyNodes has 8 workers (and one) claim SQL tasks spread over 1,000
// registered nodes (4 slots each), and over one node with as many slots as the workers take at
// once, and complete what they claim. Each iteration is one claim of up to 4 tasks and its completion;
// it reports the claims' latency and the tasks claimed per second:
//
//	go test ./internal/catalog -run '^$' -bench ClaimOverManyNodes -benchtime 2000x
func BenchmarkClaimOverManyNodes(b *testing.B) {
	const limit = 4
	for _, c := range []struct{ nodes, workers int }{{1, 8}, {1000, 8}, {1, 1}, {1000, 1}} {
		nodes, workers := c.nodes, c.workers
		b.Run(fmt.Sprintf("nodes=%d/workers=%d", nodes, workers), func(b *testing.B) {
			cl := pgtest.Shared(b)
			db := pgtest.NewDatabase(b)
			cat, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser))
			if err != nil {
				b.Fatal(err)
			}
			defer cat.Close()
			if _, err := cat.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			slots := 4
			if nodes == 1 {
				slots = workers * limit
			}
			tasks := b.N*limit + 1000
			for _, sql := range []string{
				`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
				 SELECT 'n' || lpad(g::text, 4, '0'), 'host=/nonexistent', 'n' || lpad(g::text, 4, '0'), 'primary', ` +
					fmt.Sprint(slots) + ` FROM generate_series(1, ` + fmt.Sprint(nodes) + `) g`,
				`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at)
				 SELECT 'w' || g, ` + fmt.Sprint(limit) + `, 'infinity' FROM generate_series(1, ` + fmt.Sprint(workers) + `) g`,
				`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('bench', 'sql', ` + fmt.Sprint(tasks) + `) RETURNING id)
				 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
				 SELECT j.id, 't' || g, 'sql', 'n' || lpad((1 + g % ` + fmt.Sprint(nodes) + `)::text, 4, '0'), 'app', 'SELECT 1', 3, '1 hour', 'runnable'
				 FROM j, generate_series(1, ` + fmt.Sprint(tasks) + `) g`,
				`VACUUM ANALYZE deckhand.task`,
			} {
				if _, err := cat.Pool.Exec(ctx, sql); err != nil {
					b.Fatalf("%s: %v", sql, err)
				}
			}
			var (
				mu        sync.Mutex
				latencies []time.Duration
				claimed   int
				wg        sync.WaitGroup
			)
			b.ResetTimer()
			start := time.Now()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser))
					if err != nil {
						b.Error(err)
						return
					}
					defer c.Close()
					id := int64(w + 1)
					for i := w; i < b.N; i += workers {
						t0 := time.Now()
						got, err := c.Claim(ctx, id, limit)
						d := time.Since(t0)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						latencies = append(latencies, d)
						claimed += len(got)
						mu.Unlock()
						results := make([]catalog.Result, len(got))
						for j, t := range got {
							results[j] = catalog.Result{TaskID: t.ID, Token: t.Token, WorkerID: id, Outcome: deckhandtype.OutcomeDone}
						}
						if len(results) > 0 {
							if _, err := c.Complete(ctx, results); err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if len(latencies) == 0 {
				return
			}
			slices.Sort(latencies)
			pct := func(p float64) float64 {
				return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(claimed)/elapsed.Seconds(), "tasks/s")
			b.ReportMetric(float64(claimed)/float64(len(latencies)), "tasks/claim")
		})
	}
}
