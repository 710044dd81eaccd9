package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/catalog"
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

// OwnerConn acquires a pooled session on the node connected as o.Role and checks, on the node
// itself, that o.Submitter is a member of that role. Only a session that passed the check is
// returned; the caller releases it.
func (p *Pools) OwnerConn(ctx context.Context, o Owner) (*pgxpool.Conn, error) {
	if o.Role == "" || o.Submitter == "" {
		return nil, Permanent(errors.New("task has no owner or submitter"))
	}
	pool, err := p.Get(ctx, o.DSN, o.Role)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to node %s as %s: %w", o.Node, o.Role, err)
	}
	if err := VerifyOwner(ctx, conn.Conn(), o); err != nil {
		conn.Release()
		return nil, err
	}
	return conn, nil
}

// verifyOwnerSQL runs in the owner's own session, where the owner may have created functions
// and operators of its own: every name is schema-qualified with exact argument types, so none
// of theirs can stand in for pg_catalog's.
const verifyOwnerSQL = `SELECT pg_catalog.pg_has_role($1::pg_catalog.name, CURRENT_USER, 'MEMBER'::pg_catalog.text)`

// VerifyOwner checks, on the node, that o.Submitter is a member of the session's role.
func VerifyOwner(ctx context.Context, conn *pgx.Conn, o Owner) error {
	var member bool
	err := conn.QueryRow(ctx, verifyOwnerSQL, o.Submitter).Scan(&member)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" {
		return Permanent(fmt.Errorf("submitter %q is not a role on node %s, so it cannot act as %q", o.Submitter, o.Node, o.Role))
	}
	if err != nil {
		return err
	}
	if !member {
		return Permanent(fmt.Errorf("submitter %q is not a member of role %q on node %s: permission denied", o.Submitter, o.Role, o.Node))
	}
	return nil
}

// TaskOwner is the owner session a claimed task runs in.
func TaskOwner(t *catalog.ClaimedTask) (Owner, error) {
	if t.Node == nil || t.NodeDSN == nil {
		return Owner{}, Permanent(errors.New("the task's node is no longer registered"))
	}
	return Owner{Node: *t.Node, DSN: *t.NodeDSN, Role: t.Owner, Submitter: t.SubmittedBy}, nil
}
