package executor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/internal/conninfo"
)

// Pools keeps one connection pool per (node conninfo, role). Tasks connect as their owner
// role itself, never as a privileged user that switches role: a session user that is the
// owner cannot gain privileges with RESET ROLE, SET SESSION AUTHORIZATION or set_config.
// Passwords come from the environment (pgpass, PGPASSWORD, certificates), never the catalog.
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

// Get returns the pool for dsn connected as user (empty: the user dsn names).
func (p *Pools) Get(ctx context.Context, dsn, user string) (*pgxpool.Pool, error) {
	key := poolKey{dsn, user}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool, ok := p.pools[key]; ok {
		return pool, nil
	}
	// The user goes into the conninfo before it is parsed, so that the password is looked up
	// (pgpass, service file) for the role that logs in, not for the user the conninfo names.
	cfg, err := pgxpool.ParseConfig(conninfo.WithUser(dsn, user))
	if err != nil {
		return nil, Permanent(errors.New("node conninfo cannot be parsed"))
	}
	cfg.MaxConns = p.MaxConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	cfg.ConnConfig.RuntimeParams["application_name"] = "deckhand"
	// Sessions are reset with DISCARD ALL after each task, which would invalidate cached
	// prepared statements; unnamed statements cost nothing extra here.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	// On cancellation, ask the server to cancel the running statement (so a cancelled task's
	// backend stops at once) before giving up on the socket.
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 0, DeadlineDelay: 5 * time.Second}
	}
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

// Session connects to the task's node as its owner and prepares the session for the task:
// submit-time context, statement timeout, application name, and the owner check. release
// leaves nothing of the task in the pooled session (settings, temp tables, locks); a session
// left inside a transaction or broken is closed instead.
func (p *Pools) Session(ctx context.Context, t *catalog.ClaimedTask) (conn *pgx.Conn, release func(), err error) {
	if t.Node == nil || t.NodeDSN == nil {
		return nil, nil, Permanent(errors.New("the task's node is no longer registered"))
	}
	pool, err := p.Get(ctx, *t.NodeDSN, t.Owner)
	if err != nil {
		return nil, nil, err
	}
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to node %s as %s: %w", *t.Node, t.Owner, err)
	}
	release = func() {
		c := pooled.Conn()
		if c.PgConn().TxStatus() == 'I' && !c.IsClosed() && ctx.Err() == nil {
			if _, err := c.Exec(ctx, "DISCARD ALL"); err != nil {
				c.Close(context.Background()) //nolint:errcheck
			}
		} else {
			c.Close(context.Background()) //nolint:errcheck
		}
		pooled.Release()
	}
	if err := prepareSession(ctx, pooled.Conn(), t); err != nil {
		release()
		return nil, nil, err
	}
	return pooled.Conn(), release, nil
}

// ApplicationName identifies a task attempt's backend in pg_stat_activity, so the leader can
// find and terminate it if the worker running it dies.
func ApplicationName(taskID, token int64) string {
	return "deckhand task " + strconv.FormatInt(taskID, 10) + "/" + strconv.FormatInt(token, 10)
}

// SQL runs a task's SQL text on its node, connected as its owner.
type SQL struct{ Pools *Pools }

func (s SQL) Run(ctx context.Context, t *catalog.ClaimedTask) error {
	conn, release, err := s.Pools.Session(ctx, t)
	if err != nil {
		return err
	}
	defer release()
	if !t.InTransaction {
		_, err = conn.Exec(ctx, t.SQL)
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, t.SQL)
		return err
	})
}

// prepareSession applies the submit-time context and checks, on the node itself, that the
// submitter may act as the owner — so a forged catalog row cannot borrow a role.
func prepareSession(ctx context.Context, conn *pgx.Conn, t *catalog.ClaimedTask) error {
	names := []string{"statement_timeout", "application_name"}
	values := []string{strconv.FormatInt(max(t.TimeoutMS, 1), 10), ApplicationName(t.ID, t.Token)}
	if t.SearchPath != "" {
		names = append(names, "search_path")
		values = append(values, t.SearchPath)
	}
	for k, v := range t.Settings {
		names = append(names, k)
		values = append(values, v)
	}
	var q strings.Builder
	q.WriteString("SELECT pg_has_role($1, current_user, 'MEMBER')")
	args := []any{t.SubmittedBy}
	for i := range names {
		fmt.Fprintf(&q, ", set_config($%d, $%d, false)", len(args)+1, len(args)+2)
		args = append(args, names[i], values[i])
	}
	var member bool
	dest := make([]any, 1+len(names)) // nil destinations skip the set_config results
	dest[0] = &member
	if err := conn.QueryRow(ctx, q.String(), args...).Scan(dest...); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" {
			return Permanent(fmt.Errorf("submitter %q is not a role on node %s", t.SubmittedBy, *t.Node))
		}
		return err
	}
	if !member {
		return Permanent(fmt.Errorf("submitter %q is not a member of role %q on node %s", t.SubmittedBy, t.Owner, *t.Node))
	}
	return nil
}

// TerminateAttempt ends the backend of a task attempt on its node, if it still runs, and
// waits until it is gone. It connects as the task's owner, who may always signal its own backends.
func TerminateAttempt(ctx context.Context, pools *Pools, dsn, owner string, taskID, token int64) error {
	pool, err := pools.Get(ctx, dsn, owner)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var stillThere int
	err = pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE NOT pg_terminate_backend(pid, 5000))
		FROM pg_stat_activity WHERE application_name = $1 AND usename = current_user`, ApplicationName(taskID, token)).Scan(&stillThere)
	if err != nil {
		return err
	}
	if stillThere > 0 {
		return fmt.Errorf("backend of task %d still running after terminate", taskID)
	}
	return nil
}

// Probe reports a node's role (primary or standby) and its WAL position: the replay position
// on a standby, the current write position on a primary.
func Probe(ctx context.Context, pools *Pools, dsn string) (role, lsn string, err error) {
	pool, err := pools.Get(ctx, dsn, "")
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var standby bool
	err = pool.QueryRow(ctx, `
		SELECT pg_is_in_recovery(),
			coalesce(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text, '')`,
	).Scan(&standby, &lsn)
	if err != nil {
		return "", "", err
	}
	if standby {
		return "standby", lsn, nil
	}
	return "primary", lsn, nil
}
