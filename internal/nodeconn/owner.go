package nodeconn

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Owner names a session on a node as a task's owner, on behalf of the job's submitter. Every
// built-in kind reaches a node through OwnerConn with one of these, so none can skip the check
// that the submitter may act as the owner.
type Owner struct {
	Node      string // node name, for messages
	DSN       string // the node's conninfo, as registered
	Role      string // the role the session is (session_user)
	Submitter string // the job's submitter, fixed at submission
}

// ErrRefused is wrapped by the errors of OwnerConn and VerifyOwner that say the submitter may
// not act as the owner on the node: nothing was done, and retrying cannot help.
var ErrRefused = errors.New("permission denied")

// Refused reports whether err says the submitter may not act as the owner on the node.
func Refused(err error) bool { return errors.Is(err, ErrRefused) }

// OwnerConn acquires a pooled session on the node connected as o.Role and checks, on the node
// itself, that o.Submitter is a member of that role. Only a session that passed the check is
// returned, as it started (search_path SafeSearchPath): the pool resets every session handed
// back (resetSession). The caller hands it back with Release.
func (p *Pools) OwnerConn(ctx context.Context, o Owner) (*pgxpool.Conn, error) {
	return p.acquire(ctx, o, nil)
}

// acquire is OwnerConn; then queues statements that run in the same round trip, after the
// check (the session set-up of an attempt). They run whatever the check finds,
// so they must do nothing that matters before the caller has seen its result: set up, not act.
func (p *Pools) acquire(ctx context.Context, o Owner, then func(*pgx.Batch, *pgx.Conn)) (*pgxpool.Conn, error) {
	conn, err := p.take(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := checkOwnerConn(ctx, conn, o, then); err != nil {
		return nil, err
	}
	return conn, nil
}

// take acquires a pooled session on the node connected as o.Role, not yet checked: only
// acquire and TaskTransaction, which check it before anything else runs in it, call it.
func (p *Pools) take(ctx context.Context, o Owner) (*pgxpool.Conn, error) {
	if o.Role == "" || o.Submitter == "" {
		return nil, taskerr.Permanent(fmt.Errorf("the task names no owner or no submitter on node %s: %w", o.Node, ErrRefused))
	}
	pool, err := p.get(ctx, o.DSN, o.Role)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, connectError(o, err)
	}
	return conn, nil
}

// checkOwnerConn runs acquireSQL in conn, then what then queues, in one round trip. A session
// that failed the check, or whose set-up failed, is closed and handed back.
func checkOwnerConn(ctx context.Context, conn *pgxpool.Conn, o Owner, then func(*pgx.Batch, *pgx.Conn)) error {
	b := &pgx.Batch{}
	var sessionUser string
	var member bool
	b.Queue(acquireSQL, o.Submitter).QueryRow(func(row pgx.Row) error { return row.Scan(&sessionUser, &member, nil) })
	if then != nil {
		then(b, conn.Conn())
	}
	err := conn.SendBatch(ctx, b).Close()
	if err == nil {
		err = checkOwner(o, sessionUser, member)
	}
	if err != nil {
		// The set-up may have opened a transaction: never hand such a session back.
		discard(ctx, conn)
		return ownerError(o, err)
	}
	return nil
}

// discard closes a pooled session and hands it back, for the pool to forget.
func discard(ctx context.Context, conn *pgxpool.Conn) {
	conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
	conn.Release()
}

// connectError says why a session as o.Role could not be opened. A refused login cannot get
// better by retrying: the worker has no password (or certificate) for the role, or the role may
// not log in; the message says where the password belongs, and PostgreSQL's own words.
func connectError(o Owner, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000") {
		return taskerr.Permanent(fmt.Errorf("connect to node %s as %s: %s (a worker logs in as each owner role with that role's "+
			"line in its pgpass file, or a client certificate)", o.Node, o.Role, taskerr.ConnectMessage(err)))
	}
	return fmt.Errorf("connect to node %s as %s: %w", o.Node, o.Role, err)
}

// verifyOwnerSQL runs in the owner's own session, where the owner may have created functions
// and operators of its own: every function is schema-qualified with exact argument types, so
// none of theirs can stand in for pg_catalog's (and the reset before it put the search_path
// back to SafeSearchPath).
const verifyOwnerSQL = `SELECT SESSION_USER,
	pg_catalog.pg_has_role($1::pg_catalog.name, SESSION_USER, 'MEMBER'::pg_catalog.text)`

// acquireSQL is verifyOwnerSQL for a pooled session, which also gives random() a new seed
// (seedSQL) before the session's new user runs anything. Seeding here, in the check's own
// statement, spares the reset after each use a statement and a transaction of its own.
const acquireSQL = verifyOwnerSQL + `, ` + seedSQL

// seedSQL gives random() a seed nobody knows: the last user of a pooled session may have
// chosen one (setseed, which DISCARD ALL leaves as it is) to make the next one's random()
// predictable. The seed comes from the server's strong random source (gen_random_uuid), so
// that it appears in no statement's text (pg_stat_activity shows that to others).
const seedSQL = `pg_catalog.setseed(pg_catalog.float8div(pg_catalog.float8(pg_catalog.hashtextextended(
		CAST(pg_catalog.gen_random_uuid() AS pg_catalog.text), 0::pg_catalog.int8)),
		9223372036854775808::pg_catalog.float8))`

// VerifyOwner checks, on the node, that the session is logged in as o.Role and that
// o.Submitter is a member of it; for sessions that are not pooled (a replication connection).
func VerifyOwner(ctx context.Context, conn *pgx.Conn, o Owner) error {
	var sessionUser string
	var member bool
	err := conn.QueryRow(ctx, verifyOwnerSQL, o.Submitter).Scan(&sessionUser, &member)
	if err == nil {
		err = checkOwner(o, sessionUser, member)
	}
	return ownerError(o, err)
}

// checkOwner says what the check found wrong, if anything.
func checkOwner(o Owner, sessionUser string, member bool) error {
	if sessionUser != o.Role {
		return taskerr.Permanent(fmt.Errorf("the session on node %s is %q, not the owner %q: %w", o.Node, sessionUser, o.Role, ErrRefused))
	}
	if !member {
		return taskerr.Permanent(fmt.Errorf("submitter %q is not a member of role %q on node %s: %w", o.Submitter, o.Role, o.Node, ErrRefused))
	}
	return nil
}

// ownerError words a failed check: a submitter that is no role on the node is refused; other
// errors are the node's.
func ownerError(o Owner, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil || errors.Is(err, ErrRefused):
		return err
	case errors.As(err, &pgErr) && pgErr.Code == "42704":
		return taskerr.Permanent(fmt.Errorf("submitter %q is not a role on node %s, so it cannot act as %q: %w", o.Submitter, o.Node, o.Role, ErrRefused))
	}
	return fmt.Errorf("check the owner on node %s: %w", o.Node, err)
}

// TaskOwner is the owner session a claimed task runs in, on the task's node.
func TaskOwner(t *deckhandtype.ClaimedTask) (Owner, error) {
	if t.Node == nil || t.NodeDSN == nil {
		return Owner{}, taskerr.Permanent(errors.New("the task's node is no longer registered"))
	}
	return Owner{Node: *t.Node, DSN: *t.NodeDSN, Role: t.Owner, Submitter: t.SubmittedBy}, nil
}
