package catalog

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Rows that catalog roles may lock. deckhand.pause, cancel, resume and retry lock the tasks
// and the row of a job their caller may act on, and the caller decides how long it keeps
// them: the function's statement may go on (`SELECT deckhand.pause(42), pg_sleep(3600)`), or
// its transaction stay open. A worker's write that waits for such a row must not hold back
// what it writes for other jobs: the writes that take many attempts at once (results,
// node transaction ids, settling jobs) wait at most rowLockWait, and on a lock timeout the
// worker writes each attempt's alone, so that only the one whose rows are held waits.

// rowLockWait is the lock_timeout of a worker's batched writes: far above what workers make
// one another wait (a few milliseconds), well below CatalogTimeout.
const rowLockWait = "2s"

// boundLockWait sets rowLockWait for the rest of the transaction.
const boundLockWait = `SELECT pg_catalog.set_config('lock_timeout', '` + rowLockWait + `', true)`

// IsLockTimeout reports whether err is a lock timeout (55P03): a row the write needed was
// held, perhaps by a catalog role, for longer than rowLockWait.
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
