// Package catalog owns deckhand's state in PostgreSQL: the schema and its migrations,
// every SQL statement, and every state transition (see state.go). Other packages never
// write SQL against the catalog; they call functions here.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// Catalog is a handle on the deckhand schema of one PostgreSQL database.
type Catalog struct {
	Pool *pgxpool.Pool
	// Now, when set, replaces the database clock in every time comparison and timestamp the
	// catalog writes, so tests can move time without sleeping. Production leaves it nil.
	Now func() time.Time
	// Rand, when set, replaces math/rand/v2's Float64 in picking where claims start looking for
	// nodes with work (claimStart) and for tasks that run anywhere (claimSQL's anywhere_head),
	// so tests can choose. It must be safe for concurrent use.
	Rand func() float64
	// InitLockWait bounds how long Migrate waits, in all, for locks on the catalog's tables
	// that other sessions hold; zero means DefaultInitLockWait.
	InitLockWait time.Duration

	starts    claimStarts
	seenSets  seenSets        // what the claims found runnable lately (claim_sets.go)
	claimConn claimConn       // the connection kept for claims (claim_conn.go)
	bound     *roundTripBound // nil unless opened with Options.BoundRoundTrips
}

// New wraps a pool. The pool's connections must reach the catalog database.
func New(pool *pgxpool.Pool) *Catalog { return &Catalog{Pool: pool} }

// ErrBadDSN is what Open returns (wrapped) for a catalog conninfo that cannot be parsed: bad
// input, not a failure to connect. The message never repeats a password: pgx's own masking is
// best effort (it shows 'password = secret', spaced as libpq allows, and quotes fragments of
// malformed values), so the message shows the conninfo as nodeconn.Redact hides its secrets,
// and pgx's reason without the text it quotes.
var ErrBadDSN = errors.New("catalog conninfo cannot be parsed")

type badDSNError struct{ msg string }

func newBadDSNError(dsn string, err error) badDSNError {
	reason := "cannot parse"
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		full := pe.Error()
		if i := strings.LastIndex(full, "`: "); i >= 0 {
			reason = quotedInReason.ReplaceAllString(full[i+len("`: "):], `"…"`)
		}
	}
	return badDSNError{msg: fmt.Sprintf("cannot parse `%s`: %s", nodeconn.Redact(dsn), nodeconn.Redact(reason))}
}

// quotedInReason is text that pgx's reasons quote from the conninfo.
var quotedInReason = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'[^']*'`)

func (e badDSNError) Error() string { return e.msg }

// Unwrap gives ErrBadDSN alone: pgx's error repeats the conninfo.
func (e badDSNError) Unwrap() error        { return ErrBadDSN }
func (e badDSNError) Is(target error) bool { return target == ErrBadDSN }

// DefaultConnectTimeout bounds a connection to the catalog when its conninfo sets no
// connect_timeout: as long as a worker's CatalogTimeout.
const DefaultConnectTimeout = 10 * time.Second

// Open connects to the catalog database.
func Open(ctx context.Context, dsn string) (*Catalog, error) { return OpenWith(ctx, dsn, Options{}) }

// OpenWith connects to the catalog database as o says.
func OpenWith(ctx context.Context, dsn string, o Options) (*Catalog, error) {
	if dsn == "" {
		return nil, errors.New("no catalog configured: pass --catalog or set DECKHAND_CATALOG")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("catalog DSN: %w", newBadDSNError(dsn, err))
	}
	// A worker's loops (claim, complete, heartbeat, lead, clean) each hold a connection at
	// times; pgxpool's default of max(4, CPUs) makes them queue behind one another.
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = 16
	}
	// The catalog's statements are planned once per connection: their shapes do not depend on
	// parameter values, and re-planning the claim and completion CTEs cost more than running them.
	if cfg.ConnConfig.RuntimeParams["plan_cache_mode"] == "" {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	// A generic plan's estimates can cross jit_above_cost (the leader's walk of the nodes with
	// work, estimated at a million once tens of thousands of tasks are runnable), and
	// PostgreSQL then compiles the plan's expressions with LLVM on every execution: 1.4–4.9 s
	// of the catalog's CPU each round of that walk, measured, for statements that read a few
	// index entries. No catalog statement gains from JIT.
	if cfg.ConnConfig.RuntimeParams["jit"] == "" {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	// A catalog that accepts the connection and never answers (a stopped server, packets
	// dropped silently) would otherwise hold every command, and every new connection of a
	// worker, for ever: libpq's default is no limit. connect_timeout (or PGCONNECT_TIMEOUT)
	// given by the user wins.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "deckhand"
	}
	cfg.AfterConnect = pinSearchPath
	var bound *roundTripBound
	if o.BoundRoundTrips {
		probe := cfg.ConnConfig.Config.Copy()
		// The probe's one statement names pg_catalog's objects alone; its path is pinned
		// anyway, as every catalog session's is (pinSearchPath).
		probe.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
		probe.RuntimeParams["application_name"] = "deckhand probe"
		bound = &roundTripBound{d: cfg.ConnConfig.ConnectTimeout, probe: probe}
		cfg.ConnConfig.Tracer = bound
		// The pool pings a connection that was idle before handing it out: bounded alike.
		cfg.PingTimeout = bound.d
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to catalog: %w", err)
	}
	pingCtx := ctx
	if bound != nil {
		var cancel context.CancelFunc
		pingCtx, cancel = context.WithTimeout(ctx, bound.d)
		defer cancel()
	}
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// pgx names every address and TLS mode it tried, each with the same timeout.
			return nil, fmt.Errorf("connect to catalog: %s:%d did not answer within %s: %w",
				cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("connect to catalog: %w", err)
	}
	c := New(pool)
	c.bound = bound
	return c, nil
}

// Catalog sessions resolve names with search_path = pg_catalog, pg_temp. The catalog's
// statements name its tables with their schema, but not the functions and operators they
// call (unnest, nextval, =, ...), and PostgreSQL prefers a better-matching function in any
// schema on the search_path to pg_catalog's: public.unnest(text[]) over
// pg_catalog.unnest(anyarray), public.nextval(text) for nextval('...'). Any role that may
// create objects in such a schema of the catalog's database (public, in a database created
// before PostgreSQL 15) would have its function run by workers, admins and the API, with
// their privileges. The session's own search_path, which a submission captures for its tasks
// (the role's or database's default), is kept in deckhand.caller_search_path.
const pinSearchPathSQL = `SELECT pg_catalog.set_config('deckhand.caller_search_path', pg_catalog.current_setting('search_path'), false);
	SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)`

// CallerSearchPathSQL is the catalog session's search_path as the role logged in with it.
const CallerSearchPathSQL = `COALESCE(pg_catalog.current_setting('deckhand.caller_search_path', true), pg_catalog.current_setting('search_path'))`

func pinSearchPath(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, pinSearchPathSQL)
	return err
}

// closeTimeout bounds Close.
const closeTimeout = 2 * time.Second

// Close releases the pool, waiting at most closeTimeout for its connections to close: a
// connection whose statement was given up on (the catalog stopped answering) is closed only
// after pgx has tried, for up to 15 s, to cancel that statement on the catalog, and a command
// that already has its answer (job wait's timeout) must not wait for that.
func (c *Catalog) Close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.releaseClaimConn()
		c.Pool.Close()
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// now returns the injected time, or nil so SQL falls back to now() via coalesce($n, now()).
func (c *Catalog) now() *time.Time {
	if c.Now == nil {
		return nil
	}
	t := c.Now()
	return &t
}

// CheckSchema returns a clear error when the catalog has not been initialised or is older than this build.
func (c *Catalog) CheckSchema(ctx context.Context) error {
	var v int
	err := c.Pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM deckhand.schema_migration`).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return errors.New("catalog is not initialised: run `deckhand init`")
	}
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return &refusal{"read catalog schema version: " + pgErr.Message + noAccessHint, ErrForbidden}
	}
	if err != nil {
		return fmt.Errorf("read catalog schema version: %w", err)
	}
	if want := SchemaVersion(); v < want {
		return fmt.Errorf("catalog schema is version %d, this deckhand needs %d: run `deckhand init`", v, want)
	}
	return nil
}
