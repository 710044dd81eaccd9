package nodeconn

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A pooled session is put back to how it started before another attempt may use it, whatever
// the last attempt left in it: settings (the search_path returns to its startup value,
// SafeSearchPath), session authorization, cursors, listens, advisory locks, cached plans,
// sequences' state, temporary tables, prepared statements (DISCARD ALL). random()'s seed,
// which DISCARD ALL leaves as it is, is replaced as the session is taken (acquireSQL).
//
// The pool resets a session after its release (resetSession), so no attempt waits for it. A
// transactional SQL task resets its session in the round trip of its COMMIT instead
// (CommitAndReset), which marks the session reset so that the pool does not do it again: one
// round trip where there were two. A session whose reset fails is closed, never handed out.

// resetTimeout bounds a reset; a session that cannot be reset in that time is closed.
const resetTimeout = 10 * time.Second

// resetDone marks, in the session's custom data, a session reset since its last statement.
const resetDone = "deckhand.reset"

// resetSession is the pool's AfterRelease: it resets the session unless that was done by
// CommitAndReset, and reports whether the session may be handed out again.
func resetSession(conn *pgx.Conn) bool {
	data := conn.PgConn().CustomData()
	if data[resetDone] == true {
		delete(data, resetDone)
		return conn.PgConn().TxStatus() == 'I'
	}
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	p := conn.PgConn().StartPipeline(ctx)
	queueReset(p)
	return finishReset(p, false) == nil && conn.PgConn().TxStatus() == 'I'
}

// CommitAndReset commits the session's transaction and resets the session in one round trip,
// then marks it reset. It returns the COMMIT's error: a *pgconn.PgError when the server
// refused it (and rolled back), any other error when its outcome is unknown. A session whose
// reset did not complete is left unmarked, for the pool to reset or close.
func CommitAndReset(ctx context.Context, conn *pgx.Conn) error {
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryParams("COMMIT", nil, nil, nil, nil)
	p.SendPipelineSync()
	queueReset(p)
	commitErr := readCommit(p)
	if commitErr != nil && !isServerError(commitErr) {
		p.Close() //nolint:errcheck // the connection failed: the commit's error says so
		return commitErr
	}
	// Refused or not, the commit ended the transaction before the reset's own began.
	if finishReset(p, true) == nil && conn.PgConn().TxStatus() == 'I' {
		conn.PgConn().CustomData()[resetDone] = true
	}
	return commitErr
}

// queueReset queues DISCARD ALL after a sync of its own: it must be the first statement of its
// transaction (PostgreSQL refuses it in a transaction block or within a pipeline's implicit
// one), and its effects (UNLISTEN among them) are in force when it returns.
func queueReset(p *pgconn.Pipeline) {
	p.SendQueryParams("DISCARD ALL", nil, nil, nil, nil)
	p.SendPipelineSync()
}

// readCommit flushes the pipeline and reads the result of the COMMIT it starts with and its sync.
func readCommit(p *pgconn.Pipeline) error {
	if err := p.Flush(); err != nil {
		return err
	}
	err := readResult(p)
	if _, syncErr := p.GetResults(); err == nil {
		err = syncErr
	}
	return err
}

// finishReset sends the pipeline unless it was flushed already, reads the reset's results
// (queueReset's, the last in it) and closes it; any error means the session was not reset.
func finishReset(p *pgconn.Pipeline, flushed bool) error {
	var err error
	if !flushed {
		err = p.Flush()
	}
	if err == nil {
		err = readResult(p)
		if _, syncErr := p.GetResults(); err == nil {
			err = syncErr
		}
	}
	return errors.Join(err, p.Close())
}

// readResult reads one statement's result from the pipeline.
func readResult(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return errors.New("unexpected pipeline result")
	}
	_, err = rr.Close()
	return err
}

func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
