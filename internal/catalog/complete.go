package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Result is the end of one attempt, reported by the worker that ran it (or, for OutcomeLost,
// by the leader that rescued it).
type Result struct {
	TaskID   int64
	Token    int64
	WorkerID int64
	// JobID is the task's job, when the caller knows it (0 otherwise). Nothing is written
	// from it: a worker keeps the results of a job whose rows are held together (locks.go).
	JobID int64
	// Outcome is OutcomeDone, OutcomeRetry, OutcomeFailed, OutcomeCancelled, OutcomeReleased or
	// OutcomeLost. Retry and lost become failed when the task has no attempts left.
	Outcome deckhandtype.Outcome
	Backoff time.Duration // for retry: how long the task waits before it may run again
	Err     *deckhandtype.TaskError
	// FinishedAt is when the attempt ended; zero means now on the catalog's clock, which keeps
	// attempt durations and backoffs on one clock whatever the workers' clocks say.
	FinishedAt time.Time
	// HandedTo and HandedToken name the attempt of a task claimed ahead (Ahead) that the worker
	// started in this attempt's slot on its node: recording this result hands it the slot.
	// Zero: none.
	HandedTo, HandedToken int64
	// HasDependents is the task's ClaimedTask.HasDependents: whether other tasks waited on it
	// when it was claimed. A batch none of whose tasks had any is recorded by a statement
	// without the parts that release dependents (completeAloneSQL), which checks it again on the
	// rows as locked: a task that gained dependents since costs the batch a second statement.
	HasDependents bool
}

// Completion summarizes what Complete changed.
type Completion struct {
	Applied  int // results whose token still matched; the rest were fenced off
	Runnable int // tasks that became runnable (dependents released, retries, releases)
}

// Complete records a batch of attempt results in one statement: it moves each task (guarded
// by its attempt token), records the attempt, releases dependents of finished tasks,
// unschedules the dependents of failed ones transitively, and updates job counters (from
// which the job's state follows). Rows are locked in a fixed order — tasks by id, then the
// job — the order every writer in this package uses.
func (c *Catalog) Complete(ctx context.Context, results []Result) (Completion, error) {
	out, _, err := c.CompleteAndClaim(ctx, results, 0, 0)
	return out, err
}

// CompleteAndClaim records results like Complete and, when limit > 0, claims up to limit
// runnable tasks for workerID in the same transaction — so a dependent released by these
// results starts without waiting for a second commit. It costs two pipelined round trips.
// A result whose rows a catalog role holds locked fails the whole call with a lock timeout
// (IsLockTimeout) after rowLockWait: the caller records the results one by one then.
func (c *Catalog) CompleteAndClaim(ctx context.Context, results []Result, workerID int64, limit int) (Completion, []deckhandtype.ClaimedTask, error) {
	return c.CompleteAndClaimAhead(ctx, results, workerID, limit, nil)
}

// CompleteAndClaimAhead is CompleteAndClaim whose claim also takes tasks ahead (Ahead).
func (c *Catalog) CompleteAndClaimAhead(ctx context.Context, results []Result, workerID int64, limit int, ahead Ahead) (Completion, []deckhandtype.ClaimedTask, error) {
	if len(results) == 0 {
		return Completion{}, nil, nil
	}
	named, err := completeArgs(results)
	if err != nil {
		return Completion{}, nil, err
	}
	named["now"] = c.now()
	named["released_by"] = strconv.FormatInt(results[0].WorkerID, 10)
	named["completer"] = results[0].WorkerID
	named["notify_anywhere"] = limit <= 0
	stmt := completeAloneStmt
	for _, r := range results {
		if r.HasDependents {
			stmt = completeStmt
		}
	}
	args, err := stmt.args(named)
	if err != nil {
		return Completion{}, nil, err
	}
	for try := 0; ; try++ {
		var (
			out      Completion
			claimed  []deckhandtype.ClaimedTask
			err      error
			anywhere int
			deferred bool
		)
		scan := func(row pgx.Row) error { return row.Scan(&out.Applied, &out.Runnable, &anywhere, &deferred) }
		// Right after the commit, in the same round trip: the jobs these results may have
		// ended are settled if, in a snapshot taken then, all their tasks have ended.
		settle := func(b *pgx.Batch) { b.Queue(`SELECT deckhand.settle_ended($1::bigint[])`, named["ids"]) }
		if limit <= 0 {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue(probesOnly)
			b.Queue(boundLockWait)
			b.Queue(stmt.sql, args...).QueryRow(scan)
			b.Queue("COMMIT")
			settle(b)
			err = c.inKeptTx(ctx, b)
		} else {
			claimed, err = c.inClaimTx(ctx, workerID, limit, ahead, func(b *pgx.Batch) {
				b.Queue(boundLockWait)
				b.Queue(stmt.sql, args...).QueryRow(scan)
			}, settle)
		}
		if err == nil && deferred {
			// A task gained dependents after its claim (or its result did not say it had some):
			// nothing of the batch was recorded, and what the claim took stands. The batch is
			// recorded by the statement that releases dependents, claiming into what is left of
			// the slots, so that a released dependent starts as it would have.
			all := slices.Clone(results)
			for i := range all {
				all[i].HasDependents = true
			}
			more := 0
			if limit > 0 {
				more = max(limit-len(claimed), 0)
			}
			out, again, err := c.CompleteAndClaimAhead(ctx, all, workerID, more, ahead)
			if err != nil {
				return Completion{}, nil, err
			}
			return out, append(claimed, again...), nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" && try < 5 {
			continue // two completers met on shared dependents or jobs in different orders
		}
		if err != nil {
			return Completion{}, nil, fmt.Errorf("complete %d tasks: %w", len(results), err)
		}
		if limit > 0 && anywhere > 0 && len(claimed) >= limit {
			// The claim filled its slots: what it left of the released tasks is for others.
			// Without the wake-up they would find it at their next poll; the results stand.
			c.Pool.Exec(ctx, `SELECT pg_catalog.pg_notify($1, $2)`, ChannelRunnable, named["released_by"]) //nolint:errcheck
		}
		return out, claimed, nil
	}
}

// SettleJobs folds the done tallies of the given jobs into their rows, or of every job that
// has some when ids is empty (the leader's round), deriving their states from the complete
// counts. Completions settle the jobs they ended with deckhand.settle_ended instead
// (0013_job_tally.sql); this is the backstop. Each job is settled in a
// transaction of its own, in id order: a settling never holds one job's row while it waits for
// another's (a completion writing the first job's tally could wait for it), and locking a row
// first and updating it after, in one statement, made concurrent settlings deadlock on the
// row's versions. A deadlock that remains possible (with a completion that moves the job on
// the slow path) is tried again, as a completion does.
func (c *Catalog) SettleJobs(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		if err := c.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT job_id), '{}') FROM deckhand.job_tally`).Scan(&ids); err != nil {
			return fmt.Errorf("settle jobs: %w", err)
		}
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		for try := 0; ; try++ {
			// A no-op update: the job's trigger folds the tallies and derives the state. A job
			// whose row is locked is settled at a later round: the lock may be held for as
			// long as a caller of deckhand.pause or cancel likes (locks.go), and this round
			// is the leader's, which renews its lease and rescues attempts in between.
			_, err := c.Pool.Exec(ctx, `UPDATE deckhand.job SET tasks_done = tasks_done
				WHERE id = (SELECT l.id FROM deckhand.job l WHERE l.id = $1 FOR UPDATE SKIP LOCKED)`, id)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" && try < 5 {
				continue
			}
			if err != nil {
				return fmt.Errorf("settle job %d: %w", id, err)
			}
			break
		}
	}
	return nil
}

// inKeptTx is inTx on the connection kept for claims when it is free: a completion without a
// claim runs the same completion statement as those with one, which would otherwise be planned
// again on every connection of the pool it lands on (claim_conn.go).
func (c *Catalog) inKeptTx(ctx context.Context, b *pgx.Batch) error {
	conn, release, err := c.acquireForClaim(ctx)
	if err != nil {
		return err
	}
	if err := sendTx(ctx, conn, b); err != nil {
		release(false)
		return err
	}
	release(true)
	return nil
}

// inTx sends b, a whole transaction, in one round trip on a connection of its own.
func (c *Catalog) inTx(ctx context.Context, b *pgx.Batch) error {
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return sendTx(ctx, conn, b)
}

// sendTx sends b, a whole transaction, on conn, and rolls it back if it failed.
func sendTx(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) error {
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		leaveNoTx(ctx, conn)
		return err
	}
	return nil
}

// leaveNoTx rolls back whatever transaction a failed call may have left open on conn, or
// closes it: no transaction is left open on a pooled connection.
func leaveNoTx(ctx context.Context, conn *pgxpool.Conn) {
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
	}
}

// completeArgs spreads the results over one array per column, for completeSQL's unnest;
// the caller adds now and released_by.
func completeArgs(results []Result) (pgx.StrictNamedArgs, error) {
	n := len(results)
	ids := make([]int64, n)
	tokens := make([]int64, n)
	workers := make([]int64, n)
	outcomes := make([]deckhandtype.Outcome, n)
	backoffs := make([]time.Duration, n)
	errs := make([][]byte, n)
	finished := make([]*time.Time, n)
	handedIDs, handedTokens := []int64{}, []int64{}
	ended := make(map[int64]bool, n)
	for _, r := range results {
		ended[r.TaskID] = true
	}
	for i, r := range results {
		ids[i], tokens[i], workers[i], outcomes[i], backoffs[i] = r.TaskID, r.Token, r.WorkerID, r.Outcome, r.Backoff
		// A task handed a slot whose own result is in the batch has ended too, and keeps none.
		// Left out here, it is none of the statement's handed tasks, which it so updates once.
		if r.HandedTo != 0 && !ended[r.HandedTo] {
			handedIDs, handedTokens = append(handedIDs, r.HandedTo), append(handedTokens, r.HandedToken)
		}
		if !r.FinishedAt.IsZero() {
			finished[i] = &r.FinishedAt
		}
		if r.Err != nil {
			b, err := json.Marshal(clipped(r.Err))
			if err != nil {
				return nil, err
			}
			errs[i] = b
		}
	}
	return pgx.StrictNamedArgs{"ids": ids, "tokens": tokens, "workers": workers, "outcomes": outcomes,
		"backoffs": backoffs, "errors": errs, "finished_at": finished, "handed_ids": handedIDs, "handed_tokens": handedTokens}, nil
}
