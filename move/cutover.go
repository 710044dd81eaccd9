package move

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// The cut-overs an attempt tries before it gives up (retryably) — a source whose tables are
// never free for long enough, or a target that never catches up within the budget — and the
// pause between two: it starts short and doubles, so that a busy moment passes, up to four
// times the budget (writers get at least that between two blocks) but no more than a few
// seconds, so that a node slow for a while (a load peak) does not push every later try
// minutes away. Each try blocks writers for at most the budget, however many there are.
const (
	maxCutOverTries     = 30
	firstCutOverBackoff = 200 * time.Millisecond
	cutOverBackoffCap   = 5 * time.Second
)

// backoffCap is the longest pause between two tries of a cut-over with budget.
func backoffCap(budget time.Duration) time.Duration {
	return min(cutOverBackoffCap, max(time.Second, 4*budget))
}

// cutOver is the last step of a move: with writes to the source blocked (EXCLUSIVE locks on
// all its tables; reads go on) for at most budget, the target catches up to the source's WAL
// position, the sequences are set past the source's values, the row counts compared, the
// target given its foreign keys and triggers, and the source made to refuse writes loudly;
// then both commit. If any of it does not fit in the budget, everything is rolled back,
// writers go on, and it is tried again later.
type cutOver struct {
	src, dst   *pgx.Conn // the attempt's main sessions
	flusher    *pgx.Conn // another session on the source, outside the locking transaction
	pl         *plan
	st         *structure
	budget     time.Duration
	refusal    string // function name (in each moved schema) that the source's refusing triggers call
	message    string // SQL expression of the refusal's message (TG_TABLE_SCHEMA and TG_TABLE_NAME in scope)
	waitFor    func(ctx context.Context, lsn pglogrepl.LSN) error
	log        func(msg string, args ...any)
	sleep      func(ctx context.Context, d time.Duration) error
	countLimit time.Duration
	tries      int // 0: maxCutOverTries
}

// errRetryCutOver says a try did not fit in the budget: it was rolled back.
var errRetryCutOver = errors.New("the cut-over did not fit in --max-write-block")

// run tries until a cut-over commits, and returns how long it blocked writers.
func (c *cutOver) run(ctx context.Context) (time.Duration, error) {
	tries := c.tries
	if tries <= 0 {
		tries = maxCutOverTries
	}
	backoff := firstCutOverBackoff
	var last error
	for try := 1; try <= tries; try++ {
		// Catch up without blocking anyone first, so that the wait under the locks is short.
		var lsn string
		if err := c.src.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text`).Scan(&lsn); err != nil {
			return 0, err
		}
		pos, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return 0, err
		}
		if err := c.waitFor(ctx, pos); err != nil {
			return 0, err
		}
		blocked, err := c.try(ctx)
		if err == nil {
			return blocked, nil
		}
		if !errors.Is(err, errRetryCutOver) {
			return 0, err
		}
		last = err
		c.log("move: cut-over rolled back, writers released; trying again", "try", try, "reason", err, "backoff", backoff)
		if err := c.sleep(ctx, backoff+rand.N(backoff/2+1)); err != nil {
			return 0, err
		}
		backoff = min(2*backoff, backoffCap(c.budget))
	}
	return 0, fmt.Errorf("gave up the cut-over after %d tries: %w", tries, last)
}

// try is one cut-over; it returns errRetryCutOver (wrapped) when it rolled back for want of time.
func (c *cutOver) try(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(c.budget)
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tx, err := c.src.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	// Writers queue behind the lock request as soon as it is made: the wait counts in the budget.
	// The tables are locked one after another, and a writer holding one of them while it waits
	// for one the move already holds is in a deadlock with the move. PostgreSQL aborts whichever
	// of the two has waited deadlock_timeout first: the writer, whose wait began after the
	// move's lock request. So the move gives up waiting for a lock well before that (and tries
	// again later).
	var deadlockMS int64
	if err := tx.QueryRow(ctx, `SELECT (pg_catalog.date_part('epoch'::pg_catalog.text,
		pg_catalog.current_setting('deadlock_timeout'::pg_catalog.text)::pg_catalog.interval) * 1000)::pg_catalog.int8`).Scan(&deadlockMS); err != nil {
		return 0, err
	}
	lockWait := min(c.budget, time.Duration(deadlockMS)*time.Millisecond*8/10)
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout'::pg_catalog.text, $1::pg_catalog.text, true)`,
		fmt.Sprintf("%dms", max(lockWait.Milliseconds(), 1))); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(tctx, "LOCK TABLE "+strings.Join(c.pl.locked(), ", ")+" IN EXCLUSIVE MODE"); err != nil {
		if taskerr.InUse(err) || tctx.Err() != nil {
			return 0, fmt.Errorf("%w: the source's tables were not free (%v)", errRetryCutOver, err)
		}
		return 0, err
	}
	locked := time.Since(start)
	// Every write committed before the locks is before this position.
	var lsn string
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text`).Scan(&lsn); err != nil {
		return 0, err
	}
	pos, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return 0, err
	}
	// Commits made with synchronous_commit off may sit in WAL buffers up to wal_writer_delay;
	// the slot sends nothing before it is flushed. A commit of our own (txid_current assigns a
	// transaction id, so its commit is logged and flushed) flushes everything before it now.
	flushStart := time.Now()
	if _, err := c.flusher.Exec(tctx, `SELECT pg_catalog.txid_current()`); err != nil {
		return 0, err
	}
	flushed := time.Since(flushStart)
	// Leave a quarter of the budget for what follows the catch-up.
	wctx, wcancel := context.WithDeadline(ctx, deadline.Add(-c.budget/4))
	err = c.waitFor(wctx, pos)
	wcancel()
	caughtUp := time.Since(start)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("%w: the target did not catch up with %s in time", errRetryCutOver, lsn)
		}
		return 0, err
	}
	dtx, err := c.dst.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer dtx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	finished := time.Now()
	if err := c.finish(tctx, tx, dtx); err != nil {
		if ctx.Err() == nil && tctx.Err() != nil {
			return 0, fmt.Errorf("%w: the checks and changes took too long (%v)", errRetryCutOver, err)
		}
		return 0, err
	}
	if time.Now().After(deadline.Add(-commitRoom(c.budget, flushed))) {
		return 0, fmt.Errorf("%w: done after %s", errRetryCutOver, time.Since(start).Round(time.Millisecond))
	}
	// The target first: if the source's commit fails, the move fails and the target is dropped.
	if err := dtx.Commit(ctx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	blocked := time.Since(start)
	c.log("move: cut-over timings", "locked_after", locked, "caught_up_after", caughtUp,
		"checks_and_changes", time.Since(finished), "blocked", blocked)
	return blocked, nil
}

// commitRoom is the part of the budget left for the cut-over's two commits, a round trip and a
// WAL flush each, which run after the last check of the deadline: a cut-over that finishes its
// changes later than that gives up and tries again. It is at least twice flushed, what a
// commit of the flusher took in this try (a round trip and a WAL flush on the source), so
// that it grows with the servers' load: a fixed room was overrun on a machine whose two cores
// ran several test packages at once (20 ms by 21 ms, then 50 ms by 12 ms, with a 300 ms
// budget).
func commitRoom(budget, flushed time.Duration) time.Duration {
	return max(min(budget/5, 50*time.Millisecond), 2*flushed)
}

// finish does, under the locks, what the cut-over changes: sequences, counts, the target's
// foreign keys and triggers, the source's refusal of writes.
func (c *cutOver) finish(ctx context.Context, src, dst pgx.Tx) error {
	for _, seq := range c.pl.sequences {
		var last int64
		var called bool
		if err := src.QueryRow(ctx, "SELECT last_value, is_called FROM "+seq).Scan(&last, &called); err != nil {
			return fmt.Errorf("read sequence %s: %w", seq, err)
		}
		if _, err := dst.Exec(ctx, `SELECT pg_catalog.setval($1::pg_catalog.text::pg_catalog.regclass, $2::pg_catalog.int8, $3::pg_catalog.bool)`,
			seq, last, called); err != nil {
			return fmt.Errorf("set sequence %s on the target: %w", seq, err)
		}
	}
	if err := c.compareCounts(ctx, src, dst); err != nil {
		return err
	}
	for _, fk := range c.pl.fks {
		stmt := "ALTER TABLE " + fk.Table + " ADD CONSTRAINT " + pgx.Identifier{fk.Name}.Sanitize() + " " + fk.Definition
		if !fk.Partitioned {
			stmt += " NOT VALID" // validated after the cut-over, without blocking anyone
		}
		if _, err := dst.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("add foreign key %s to %s on the target: %w", fk.Name, fk.Table, err)
		}
	}
	if strings.TrimSpace(c.st.triggers) != "" {
		if _, err := dst.Conn().PgConn().Exec(ctx, psqlOnly.ReplaceAllString(c.st.triggers, "")).ReadAll(); err != nil {
			return fmt.Errorf("create triggers on the target: %w", err)
		}
		if _, err := dst.Exec(ctx, `SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)`); err != nil {
			return err
		}
	}
	for _, schema := range c.pl.schemas {
		fn := pgx.Identifier{schema, c.refusal}.Sanitize()
		body := "BEGIN RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction', MESSAGE = " + c.message +
			", HINT = 'Send writes to the relation''s new location; see deckhand placements.'; END"
		if _, err := src.Exec(ctx, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql"+
			" SET search_path = pg_catalog, pg_temp AS "+literal(body)); err != nil {
			return fmt.Errorf("create %s on the source: %w", fn, err)
		}
	}
	for _, r := range c.pl.tables {
		if _, err := src.Exec(ctx, "CREATE TRIGGER "+pgx.Identifier{c.refusal}.Sanitize()+
			" BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+r.ident()+
			" FOR EACH STATEMENT EXECUTE FUNCTION "+pgx.Identifier{r.Schema, c.refusal}.Sanitize()+"()"); err != nil {
			return fmt.Errorf("make %s refuse writes on the source: %w", r.ident(), err)
		}
	}
	return nil
}

// compareCounts counts every copied table's rows on both sides at once and refuses a difference.
func (c *cutOver) compareCounts(ctx context.Context, src, dst pgx.Tx) error {
	tables := c.pl.copied()
	count := func(tx pgx.Tx, into []int64) func() error {
		return func() error {
			for i, r := range tables {
				if err := tx.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM ONLY "+r.ident()).Scan(&into[i]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// Row security that applies to the owner fails the counts rather than filtering them.
	for _, tx := range []pgx.Tx{src, dst} {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('row_security', 'off', true)`); err != nil {
			return err
		}
	}
	srcN, dstN := make([]int64, len(tables)), make([]int64, len(tables))
	var g errgroup.Group
	g.Go(count(src, srcN))
	g.Go(count(dst, dstN))
	if err := g.Wait(); err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	for i, r := range tables {
		if srcN[i] != dstN[i] {
			return taskerr.Permanent(fmt.Errorf("table %s has %d rows on the source but %d on the target after catching up", r.ident(), srcN[i], dstN[i]))
		}
	}
	return nil
}

// validateForeignKeys validates the foreign keys the cut-over added NOT VALID; the target is
// the tables' home by then, and VALIDATE blocks no writer (SHARE UPDATE EXCLUSIVE).
func validateForeignKeys(ctx context.Context, dst *pgx.Conn, fks []foreignKey) error {
	var errs []error
	for _, fk := range fks {
		if fk.Partitioned {
			continue
		}
		_, err := dst.Exec(ctx, "ALTER TABLE "+fk.Table+" VALIDATE CONSTRAINT "+pgx.Identifier{fk.Name}.Sanitize())
		var pgErr *pgconn.PgError
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42704") {
			errs = append(errs, fmt.Errorf("validate %s of %s: %w", fk.Name, fk.Table, err))
		}
	}
	return errors.Join(errs...)
}
