package catalog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/procstat"
)

// BenchmarkRoundServerCPU measures what one worker's claim and completion rounds cost the
// catalog's server in CPU, read from the backends' own counters (/proc: the harness's server
// runs on this machine): an idle claim (nothing runnable), a claim of one task and its
// completion, and a claim of 100 tasks and their completion. The first two are a round's
// fixed cost, which small batches (many workers of low concurrency, a chain's hand-offs) pay
// per task; the last shows what a task adds. Then rounds of 4 tasks bound to nodes, as a
// worker of 4 slots makes them: on one node of 32 slots (the claim looks at every node), and
// over 1,000 nodes of one slot each (the claim walks a few of them). The counters tick every
// 10 ms, so run enough rounds:
//
//	go test ./internal/catalog -run '^$' -bench RoundServerCPU -benchtime 3000x
func BenchmarkRoundServerCPU(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch int // tasks claimed and completed per round; 0: an idle claim
		// nodes, when not 0, is how many nodes of nodeSlots slots each the tasks are spread
		// over (SQL tasks, round-robin); otherwise they run anywhere (noop).
		nodes, nodeSlots int
	}{
		{"idle-claim", 0, 0, 0}, {"claim-complete-1", 1, 0, 0}, {"claim-complete-100", 100, 0, 0},
		{"one-node-claim-complete-4", 4, 1, 32}, {"1000-nodes-claim-complete-4", 4, 1000, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			cat := migratedCatalog(b)
			tasks := b.N * c.batch
			seed := `WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('bench', 'noop', ` + fmt.Sprint(max(tasks, 1)) + `) RETURNING id)
				 INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state)
				 SELECT j.id, 't' || g, 'noop', 'app', 3, '1 hour', 'runnable' FROM j, generate_series(1, ` + fmt.Sprint(tasks) + `) g`
			if c.nodes > 0 {
				// Twice as many as the rounds take: claims start at random nodes and drain
				// some sooner than others, and each round must still find 4 nodes with work.
				tasks *= 2
				seed = fmt.Sprintf(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks)
					SELECT 'n' || g, 'host=/nonexistent', 'n' || g, 'primary', %d FROM generate_series(1, %d) g`, c.nodeSlots, c.nodes) + `;
				WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('bench', 'sql', ` + fmt.Sprint(tasks) + `) RETURNING id)
				 INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
				 SELECT j.id, 't' || g, 'sql', 'n' || (1 + g % ` + fmt.Sprint(c.nodes) + `), 'app', 'SELECT 1', 3, '1 hour', 'runnable'
				 FROM j, generate_series(1, ` + fmt.Sprint(tasks) + `) g`
			}
			for _, sql := range []string{
				`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 100, 'infinity')`,
				seed,
				`VACUUM ANALYZE deckhand.task`,
			} {
				if _, err := cat.Pool.Exec(ctx, sql); err != nil {
					b.Fatalf("%s: %v", sql, err)
				}
			}
			var workerID int64
			if err := cat.Pool.QueryRow(ctx, `SELECT id FROM deckhand.worker`).Scan(&workerID); err != nil {
				b.Fatal(err)
			}
			limit := c.batch
			if limit == 0 {
				limit = 4
			}
			round := func() error {
				got, err := cat.Claim(ctx, workerID, limit)
				if err != nil || c.batch == 0 {
					if err == nil && len(got) > 0 {
						err = fmt.Errorf("an idle claim took %d tasks", len(got))
					}
					return err
				}
				if len(got) != c.batch {
					return fmt.Errorf("claimed %d tasks, want %d", len(got), c.batch)
				}
				results := make([]catalog.Result, len(got))
				for i, t := range got {
					results[i] = catalog.Result{TaskID: t.ID, Token: t.Token, WorkerID: workerID, Outcome: deckhandtype.OutcomeDone}
				}
				_, err = cat.Complete(ctx, results)
				return err
			}
			// The pool's connections exist, and their plans are made, before the count starts.
			if err := round(); err != nil {
				b.Fatal(err)
			}
			// Every vacuumRounds rounds the task table is vacuumed, outside the count, as
			// autovacuum keeps a busy catalog: otherwise the last rounds of a drained job
			// would read the dead index entries of every task claimed before them.
			const vacuumRounds = 200
			var used int64
			b.ResetTimer()
			for i := 1; i < b.N; i += vacuumRounds {
				before, err := backendTicks(ctx, cat)
				if err != nil {
					b.Fatal(err)
				}
				for j := i; j < min(i+vacuumRounds, b.N); j++ {
					if err := round(); err != nil {
						b.Fatal(err)
					}
				}
				after, err := backendTicks(ctx, cat)
				if err != nil {
					b.Fatal(err)
				}
				used += after - before
				b.StopTimer()
				if _, err := cat.Pool.Exec(ctx, `VACUUM deckhand.task`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			if b.N > 1 {
				perRound := float64(used) * 10_000 / float64(b.N-1) // a tick is 10 ms
				b.ReportMetric(perRound, "server-µs/round")
				if c.batch > 0 {
					b.ReportMetric(perRound/float64(c.batch), "server-µs/task")
				}
			}
		})
	}
}

// backendTicks sums the CPU time (user and system, in 10 ms clock ticks) the server's
// backends connected to the catalog's database have used so far.
func backendTicks(ctx context.Context, cat *catalog.Catalog) (int64, error) {
	rows, err := cat.Pool.Query(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity WHERE datname = pg_catalog.current_database()`)
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, pid := range pids {
		s, ok := procstat.Of(pid)
		if !ok {
			return 0, fmt.Errorf("the server's backend %d is not a process of this machine", pid)
		}
		sum += s.CPU
	}
	return int64(sum / (10 * time.Millisecond)), nil
}
