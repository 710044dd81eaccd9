package nodeconn

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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
)

// XactStatus asks o's node what became of transaction xid: for an attempt whose COMMIT was
// sent but whose answer never came (the connection broke).
func XactStatus(ctx context.Context, pools *Pools, o Owner, xid string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if err != nil {
		return "", err
	}
	defer Release(ctx, conn)
	return xactStatus(ctx, conn.Conn(), xid)
}

func xactStatus(ctx context.Context, conn *pgx.Conn, xid string) (string, error) {
	var status *string
	err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_xact_status($1::pg_catalog.text::pg_catalog.xid8)`, xid).Scan(&status)
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
