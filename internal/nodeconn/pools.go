package nodeconn

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// Pools keeps one connection pool per (node conninfo, role). Tasks connect as their owner
// role itself, never as a privileged user that switches role: a session user that is the
// owner cannot gain privileges with RESET ROLE, SET SESSION AUTHORIZATION or set_config.
// Passwords come from the environment (pgpass, certificates), never the catalog.
//
// Pools of owner roles are reached only through OwnerConn, which checks on the node that the
// job's submitter may act as the owner; nothing outside this package gets a pool.
type Pools struct {
	MaxConns int32

	mu    sync.Mutex
	pools map[poolKey]*pgxpool.Pool
}

type poolKey struct{ dsn, user string }

// NewPools returns an empty pool set whose pools hold at most maxConns connections each.
func NewPools(maxConns int) *Pools {
	return &Pools{MaxConns: int32(max(maxConns, 1)), pools: map[poolKey]*pgxpool.Pool{}}
}

// SafeSearchPath is every node session's search_path until a task's own SQL needs the job's:
// an owner may create functions and operators in schemas it owns, and none of them may stand
// in for pg_catalog's in what deckhand itself runs. pg_temp comes last, where it can shadow
// nothing (PostgreSQL never looks up functions or operators there).
const SafeSearchPath = "pg_catalog, pg_temp"

// get returns the pool for dsn connected as user (empty: the user dsn names).
func (p *Pools) get(ctx context.Context, dsn, user string) (*pgxpool.Pool, error) {
	key := poolKey{dsn, user}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool, ok := p.pools[key]; ok {
		return pool, nil
	}
	// The user goes into the conninfo before it is parsed, so that the password is looked up
	// (pgpass, service file) for the role that logs in, not for the user the conninfo names.
	cfg, err := pgxpool.ParseConfig(WithUser(dsn, user))
	if err != nil {
		return nil, taskerr.Permanent(errors.New("node conninfo cannot be parsed"))
	}
	if user != "" && cfg.ConnConfig.User != user {
		return nil, taskerr.Permanent(errors.New("node conninfo cannot be made to connect as the task's owner"))
	}
	cfg.MaxConns = p.MaxConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	cfg.ConnConfig.RuntimeParams["application_name"] = "deckhand"
	// A startup parameter, so that it is in force before the first statement, outranks the
	// role's and database's own defaults, and is what RESET ALL returns to.
	cfg.ConnConfig.RuntimeParams["search_path"] = SafeSearchPath
	// The same for the encoding, which the owner's or the database's defaults could set to one
	// where a multibyte character ends in a backslash: the text deckhand writes (QuoteLiteral),
	// and the text pgx reads, is UTF-8.
	cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	// Sessions are reset (DEALLOCATE ALL among the rest) before each use, which would
	// invalidate cached prepared statements; unnamed statements cost nothing extra here.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	// On cancellation, ask the server to cancel the running statement (so a cancelled task's
	// backend stops at once) before giving up on the socket.
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 0, DeadlineDelay: 5 * time.Second}
	}
	cfg.AfterRelease = resetSession
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.pools[key] = pool
	return pool, nil
}

// Close closes every pool.
func (p *Pools) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pool := range p.pools {
		pool.Close()
		delete(p.pools, k)
	}
}

// Release hands a session back to its pool, which resets it (resetSession) before another use
// may take it. A session left inside a transaction, broken, or whose context ended is closed
// instead.
func Release(ctx context.Context, conn *pgxpool.Conn) {
	c := conn.Conn()
	if c.PgConn().TxStatus() != 'I' || c.IsClosed() || ctx.Err() != nil {
		c.Close(context.Background()) //nolint:errcheck
	}
	conn.Release()
}
