package cleanup

import (
	"context"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/jackc/pgx/v5"
)

// Removal primitives: dropping an object without making anyone wait long behind its lock, and
// seeing whether anyone holds it. The cleaner and the features that drop things use them.

// DefaultLockTimeout bounds how long a drop may make other sessions queue behind its ACCESS
// EXCLUSIVE lock request. The catalog setting cleanup_lock_timeout overrides it.
const DefaultLockTimeout = 100 * time.Millisecond

// LockTimeoutSetting is the deckhand.setting that overrides DefaultLockTimeout.
const LockTimeoutSetting = "cleanup_lock_timeout"

// LockTimeout reads the configured lock timeout of drops, DefaultLockTimeout when unset or invalid.
func LockTimeout(ctx context.Context, cat *catalog.Catalog) time.Duration {
	if cat == nil {
		return DefaultLockTimeout
	}
	v, err := cat.Setting(ctx, LockTimeoutSetting, "")
	if err != nil || v == "" {
		return DefaultLockTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return DefaultLockTimeout
	}
	return d
}

// DropInTx runs a DROP statement in its own transaction under lock_timeout, so that sessions
// arriving after it queue behind its lock request for at most that long.
func DropInTx(ctx context.Context, conn *pgx.Conn, stmt string, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := SetLockTimeout(ctx, tx, lockTimeout); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt)
		return err
	})
}

// SetLockTimeout sets lock_timeout for the rest of tx.
func SetLockTimeout(ctx context.Context, tx pgx.Tx, d time.Duration) error {
	_, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout'::pg_catalog.text, $1::pg_catalog.text, true)`, millis(d))
	return err
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

// RelationBusy reports whether another session holds, or waits for, a lock on any of the
// relations (qualified, quoted names); relations that do not exist count as free. Reading
// pg_locks takes no lock on the relations, so probing never gets in anyone's way.
func RelationBusy(ctx context.Context, conn *pgx.Conn, relations []string) (bool, error) {
	var busy bool
	err := conn.QueryRow(ctx, relationBusySQL, relations).Scan(&busy)
	return busy, err
}

// relationBusySQL runs in owner sessions whose search_path is SafeSearchPath, so its operators
// are pg_catalog's; its functions are named with their schema and argument types.
const relationBusySQL = `
	SELECT EXISTS (
		SELECT 1 FROM pg_catalog.pg_locks l
		WHERE l.locktype = 'relation'
		  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
		  AND l.relation IN (SELECT pg_catalog.to_regclass(r)::pg_catalog.oid FROM pg_catalog.unnest($1::pg_catalog.text[]) AS r
		                     UNION ALL
		                     SELECT i.indrelid FROM pg_catalog.pg_index i
		                     WHERE i.indexrelid IN (SELECT pg_catalog.to_regclass(r)::pg_catalog.oid FROM pg_catalog.unnest($1::pg_catalog.text[]) AS r))
		  AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid())`

// WaitFree waits until busy reports false or max has passed, probing every interval. It
// returns ctx's error when ctx ends first.
func WaitFree(ctx context.Context, interval, max time.Duration, busy func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		b, err := busy(ctx)
		if err != nil {
			return err
		}
		if !b {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(interval, time.Until(deadline))):
		}
	}
	return ctx.Err()
}
