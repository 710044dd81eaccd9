package nodeconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ApplicationName identifies a task attempt's backend in pg_stat_activity, so the leader can
// find and terminate it if the worker running it dies.
func ApplicationName(taskID, token int64) string {
	return "deckhand task " + strconv.FormatInt(taskID, 10) + "/" + strconv.FormatInt(token, 10)
}

// terminateSQL ends the owner's backends that carry the attempt's application_name. It runs
// in an owner session fresh from OwnerConn, with the search_path SafeSearchPath, and names
// every function with its schema and argument types.
const terminateSQL = `
	SELECT pg_catalog.count(*) FILTER (WHERE NOT pg_catalog.pg_terminate_backend(a.pid, 5000::pg_catalog.int8))
	FROM pg_catalog.pg_stat_activity a
	WHERE a.application_name = $1::pg_catalog.text AND a.usename = SESSION_USER`

// TerminateAttempt ends the backend of a task attempt on its node, if it still runs, and
// waits until it is gone: from then on the attempt can neither commit nor record a
// transaction that could. It connects as the task's owner, who may always signal its own
// backends, through OwnerConn: when the submitter may not act as the owner the attempt can
// never have run, and the error wraps ErrRefused.
func TerminateAttempt(ctx context.Context, pools *Pools, o Owner, taskID, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if err != nil {
		return err
	}
	defer Release(ctx, conn)
	var stillThere int
	if err := conn.QueryRow(ctx, terminateSQL, ApplicationName(taskID, token)).Scan(&stillThere); err != nil {
		return err
	}
	if stillThere > 0 {
		return fmt.Errorf("backend of task %d still running after terminate", taskID)
	}
	return nil
}

// What pg_xact_status says of a node transaction; "" when the node no longer knows (an id
// older than its oldest kept commit status).
const (
	XactCommitted  = "committed"
	XactAborted    = "aborted"
	XactInProgress = "in progress"
	// XactFuture: the server, a primary, has not yet given out the id. No server that ran
	// the transaction says that of it: the one the conninfo reaches now is another (a standby
	// promoted before the transaction reached it, a restored backup), and the transaction
	// did not commit there.
	XactFuture = "future"
)

// XactStatus asks o's node what became of transaction xid: for an attempt whose COMMIT was
// sent but whose answer never came (the connection broke).
func XactStatus(ctx context.Context, pools *Pools, o Owner, xid string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if Refused(err) {
		// The submitter may no longer act as the owner there (a membership revoked since
		// the attempt ran), and never will again: asking as the owner would be refused for
		// ever. What became of a transaction is no secret of the owner's (pg_xact_status
		// needs no privilege): ask as the user the node's conninfo names, as Probe does.
		pool, perr := pools.get(ctx, o.DSN, "")
		if perr != nil {
			return "", perr
		}
		pc, perr := pool.Acquire(ctx)
		if perr != nil {
			return "", perr
		}
		defer Release(ctx, pc)
		return xactStatus(ctx, pc.Conn(), xid)
	}
	if err != nil {
		return "", err
	}
	defer Release(ctx, conn)
	return xactStatus(ctx, conn.Conn(), xid)
}

func xactStatus(ctx context.Context, conn *pgx.Conn, xid string) (string, error) {
	var status *string
	err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_xact_status($1::pg_catalog.text::pg_catalog.xid8)`, xid).Scan(&status)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22023" {
		// "transaction ID ... is in the future", the only invalid_parameter_value that
		// pg_xact_status raises for a well-formed id; its words depend on lc_messages. Only a
		// primary's word is final: a standby that has not replayed as far as the id says the
		// same of a transaction its primary committed, and is asked again later.
		var standby bool
		if rerr := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&standby); rerr != nil || standby {
			return "", err
		}
		return XactFuture, nil
	}
	if err != nil || status == nil {
		return "", err
	}
	return *status, nil
}

// Probe reports a node's role (primary or standby) and its WAL position: the replay position
// on a standby, the current write position on a primary. It connects as the user the node's
// conninfo names, not as any task's owner.
func Probe(ctx context.Context, pools *Pools, dsn string) (role, lsn string, err error) {
	pool, err := pools.get(ctx, dsn, "")
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var standby bool
	err = pool.QueryRow(ctx, `
		SELECT pg_catalog.pg_is_in_recovery(),
			coalesce(CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
			              ELSE pg_catalog.pg_current_wal_lsn() END::pg_catalog.text, '')`,
	).Scan(&standby, &lsn)
	if err != nil {
		return "", "", err
	}
	if standby {
		return "standby", lsn, nil
	}
	return "primary", lsn, nil
}

// heldSQL reports, by position, which of the names ($1 schemas, $2 relations, empty for a
// whole schema) the database holds. Everything is schema-qualified: the session's search_path is
// SafeSearchPath already, but nothing here should depend on it.
const heldSQL = `
	SELECT n.ord::pg_catalog.int4
	FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) WITH ORDINALITY AS n(s, r, ord)
	WHERE CASE WHEN n.r OPERATOR(pg_catalog.=) '' THEN EXISTS (
	          SELECT 1 FROM pg_catalog.pg_namespace ns WHERE ns.nspname OPERATOR(pg_catalog.=) n.s)
	      ELSE EXISTS (
	          SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid OPERATOR(pg_catalog.=) c.relnamespace
	          WHERE ns.nspname OPERATOR(pg_catalog.=) n.s AND c.relname OPERATOR(pg_catalog.=) n.r
	            AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,m,f}'::pg_catalog."char"[])) END
	ORDER BY n.ord`

// Held reports which of names a node's database holds: a name of one part is a schema, of two
// a table (or a view, a materialized view, a foreign table) of a schema. Like Probe it
// connects as the user the node's conninfo names, not as any task's owner: the answer must
// not depend on whether an owner may log in there (a move's check that no other group holds
// the name it places would otherwise pass for an owner the node does not know). It reads
// names from pg_catalog and nothing else.
func Held(ctx context.Context, pools *Pools, dsn string, names []pgx.Identifier) ([]pgx.Identifier, error) {
	schemas, rels := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		switch len(n) {
		case 1:
			schemas[i] = n[0]
		case 2:
			schemas[i], rels[i] = n[0], n[1]
		default:
			return nil, fmt.Errorf("held: %q is not a schema or a schema-qualified name", n.Sanitize())
		}
	}
	pool, err := pools.get(ctx, dsn, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, _ := pool.Query(ctx, heldSQL, schemas, rels)
	found, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make([]pgx.Identifier, 0, len(found))
	for _, i := range found {
		out = append(out, names[i-1])
	}
	return out, nil
}
