package logicalapply

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config says where an Applier reads and writes. Source and Target are the first run's
// connections; Use swaps them for the next run.
type Config struct {
	// Source is a replication connection (replication=database) to the source, opened by the
	// caller as the owner. Run leaves it in streaming mode: close it after Run returns.
	Source *pgconn.PgConn
	// Slot is an existing logical slot using pgoutput.
	Slot string
	// Publication is an existing publication on the source, created WITH
	// (publish_via_partition_root = true).
	Publication string
	// Target is a session on the target as the owner; Run applies its transactions on it, with
	// statements it prepares there, and sets its search_path to pg_catalog, pg_temp. It must
	// use the extended protocol (not QueryExecModeSimpleProtocol).
	Target *pgx.Conn
	// ProgressTable is a table on the target ("schema"."table", created by
	// EnsureProgressTable) where Run writes the source commit LSN in the same target
	// transaction as the changes it applied: the target itself says exactly what it has
	// applied, so a resumed Run skips exactly that and replays nothing twice.
	ProgressTable pgx.Identifier
	// Applied is called when the applied position advances — after each target commit, and
	// when an idle source reports its position — with the position now applied; the caller
	// makes it durable in its catalog (for progress reports). Only after Applied returns does
	// Run confirm the position to the source, so the slot never advances past the target. An
	// error ends Run (retryable). A new run reports the progress table's position first, which
	// may be lower than an idle position an earlier run reported: keep the highest. May be nil.
	Applied func(ctx context.Context, lsn pglogrepl.LSN) error
	Logger  *slog.Logger
	Now     func() time.Time // injectable clock (nil: time.Now)

	// MaxBatchChanges bounds the changes applied in one target transaction when several
	// source transactions are waiting (default 5000); a larger source transaction is never
	// split.
	MaxBatchChanges int
	// MaxBatchDelay bounds how long a target transaction gathers waiting source
	// transactions (default 100ms).
	MaxBatchDelay time.Duration
	// LockTimeout bounds how long a target transaction waits for a lock (default 10s): for the
	// progress row that a stale session of an earlier run may still hold, or for rows another
	// writer holds. Past it, Run returns a retryable error instead of hanging.
	LockTimeout time.Duration
	// StatusInterval is how often the source hears the confirmed position when nothing else
	// prompts it (default 10s; keep it under the source's wal_sender_timeout).
	StatusInterval time.Duration
}

// Stats count what an Applier did, over all its runs.
type Stats struct {
	Transactions   int64 // source transactions applied
	Changes        int64 // rows inserted, updated or deleted, and tables truncated, as the source sent them
	Commits        int64 // target transactions committed
	Skipped        int64 // source transactions skipped because the target had already applied them
	UnchangedToast int64 // column values the source did not send (unchanged TOAST), left alone
	MissingUpdates int64 // updates that found no row on the target
	MissingDeletes int64 // deletes that found no row on the target (say, gone by ON DELETE CASCADE)
}

// Applier applies a slot's changes on a target; see the package documentation.
type Applier struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	running atomic.Bool

	// streamFromSlot makes runs ask the source for everything after the slot's confirmed
	// position, ignoring the progress row: tests use it to prove the skip of what the
	// target already has.
	streamFromSlot bool

	mu      sync.Mutex
	applied pglogrepl.LSN
	changed chan struct{} // closed and replaced whenever applied advances
	want    pglogrepl.LSN // the highest position a WaitApplied waits for
	poke    chan struct{} // a WaitApplied started waiting

	stats struct {
		transactions, changes, commits, skipped, toast, missingUpdates, missingDeletes atomic.Int64
	}
}

// New returns an Applier for cfg; Run starts it.
func New(cfg Config) *Applier {
	if cfg.MaxBatchChanges <= 0 {
		cfg.MaxBatchChanges = 5000
	}
	if cfg.MaxBatchDelay <= 0 {
		cfg.MaxBatchDelay = 100 * time.Millisecond
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 10 * time.Second
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	a := &Applier{cfg: cfg, log: cfg.Logger, now: cfg.Now, changed: make(chan struct{}), poke: make(chan struct{}, 1)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// Use sets the connections the next Run uses, after a run ended (say, with a dropped
// connection). It must not be called while Run runs.
func (a *Applier) Use(source *pgconn.PgConn, target *pgx.Conn) {
	a.cfg.Source, a.cfg.Target = source, target
}

// Applied returns the position applied so far: every source transaction that committed
// before it is on the target. Safe from other goroutines.
func (a *Applier) Applied() pglogrepl.LSN {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied
}

// WaitApplied returns once Applied() >= lsn, or with ctx's error. While it waits, the running
// Run asks the source for its position every few milliseconds, so an idle source is caught
// up without waiting for a keepalive.
//
// To wait for everything committed on the source so far, pass pg_current_wal_insert_lsn()
// read after the commits: pg_current_wal_lsn() is the write position, which asynchronous
// commits (synchronous_commit = off) may lie beyond. An insert position just past a page
// header counts as reached at the page's start, where the source's position stops when the
// last record ends at the page boundary.
func (a *Applier) WaitApplied(ctx context.Context, lsn pglogrepl.LSN) error {
	for {
		a.mu.Lock()
		if reached(a.applied, lsn) {
			a.mu.Unlock()
			return nil
		}
		if lsn > a.want {
			a.want = lsn
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case a.poke <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waited reports whether a WaitApplied waits for a position not yet applied.
func (a *Applier) waited() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !reached(a.applied, a.want)
}

// WAL pages are 8 kB (PostgreSQL's default XLOG_BLCKSZ) and start with a header of at most 40
// bytes (a segment's first page), where no record starts.
const (
	walPageSize      = 8192
	walPageHeaderMax = 40
)

// reached reports whether applied has reached lsn: it is at or past it, or at the start of
// the page whose header lsn points into or just past (the insert position at a page boundary
// points past the header, the end of the last record does not).
func reached(applied, lsn pglogrepl.LSN) bool {
	return applied >= lsn || (applied > 0 && applied%walPageSize == 0 && lsn-applied <= walPageHeaderMax)
}

// advance moves the applied position forward (never back) and wakes the waiters.
func (a *Applier) advance(lsn pglogrepl.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if lsn <= a.applied {
		return
	}
	a.applied = lsn
	close(a.changed)
	a.changed = make(chan struct{})
}

// Stats returns what the Applier did so far. Safe from other goroutines.
func (a *Applier) Stats() Stats {
	return Stats{
		Transactions:   a.stats.transactions.Load(),
		Changes:        a.stats.changes.Load(),
		Commits:        a.stats.commits.Load(),
		Skipped:        a.stats.skipped.Load(),
		UnchangedToast: a.stats.toast.Load(),
		MissingUpdates: a.stats.missingUpdates.Load(),
		MissingDeletes: a.stats.missingDeletes.Load(),
	}
}
