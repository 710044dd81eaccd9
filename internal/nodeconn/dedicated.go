package nodeconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// DedicatedSession opens a session as o.Role on o's node that belongs to no pool, for a task
// that needs several sessions on a node at once (a move copies tables in parallel and applies
// changes beside its own sessions): drawing them from a pool sized for the worker's
// concurrency could leave tasks waiting on each other for ever. It is checked like a pooled
// session (the session user is the owner, the submitter a member of it) and set up like
// Session: SafeSearchPath, the job's settings, the statement timeout, the attempt's
// application_name (by which the leader finds it should the worker die). Close it when done.
func DedicatedSession(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask) (*pgx.Conn, error) {
	if o.Role == "" || o.Submitter == "" {
		return nil, taskerr.Permanent(fmt.Errorf("the task names no owner or no submitter on node %s: %w", o.Node, ErrRefused))
	}
	cfg, err := pgx.ParseConfig(WithUser(o.DSN, o.Role))
	if err != nil {
		return nil, taskerr.Permanent(errors.New("node conninfo cannot be parsed"))
	}
	if cfg.User != o.Role {
		return nil, taskerr.Permanent(errors.New("node conninfo cannot be made to connect as the task's owner"))
	}
	cfg.RuntimeParams["search_path"] = SafeSearchPath
	cfg.RuntimeParams["client_encoding"] = "UTF8" // as pooled sessions', and for the same reason
	cfg.RuntimeParams["application_name"] = ApplicationName(t.ID, t.Token)
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 0, DeadlineDelay: 5 * time.Second}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(o, err)
	}
	names, values, err := settings(t, false)
	if err == nil {
		err = VerifyOwner(ctx, conn, o)
	}
	if err == nil {
		_, err = conn.Exec(ctx, setConfigSQL(len(names), false), setConfigArgs(names, values)...)
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
		return nil, err
	}
	return conn, nil
}
