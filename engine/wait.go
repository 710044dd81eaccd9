package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Wait blocks until the job ends or ctx is done, and returns the job as it ended. It wakes on
// the job's state-change notification, polling every second should one be missed; progress,
// when not nil, is called at most every 250 ms with the job's counters.
//
// A catalog that restarts or fails over meanwhile is waited out: Wait polls, retrying with
// backoff, and listens again once the catalog is back. An answer ends it early (the job does
// not exist, or the caller may not see it), and so does a catalog that stopped answering at
// all: when waitSilentReads reads in a row got no reply in time (each on a new connection
// after the first), Wait returns an error wrapping ErrNoAnswer. A refused connection is an
// answer of sorts (the server is restarting) and is waited out; silence is not, as nothing
// says it will end, and a wait that nobody can see stall must not hold its caller for ever.
func (c *Client) Wait(ctx context.Context, id int64, progress func(deckhandtype.Job)) (deckhandtype.Job, error) {
	tick := time.Second
	if progress != nil {
		tick = 250 * time.Millisecond
	}
	bound := waitReadBound
	if b := c.cat.RoundTripBound(); b > 0 {
		bound = min(bound, b)
	}
	l := &jobListener{pool: c.cat.Pool}
	defer l.close()
	var (
		prefix   string // of the job's notifications: "<key>:"
		job      deckhandtype.Job
		failures int
		silent   int // reads in a row that got no reply in time
	)
	for {
		// Listen first, then read: a change committed in between is seen by the read, one
		// committed after it is notified. While the catalog does not answer, the reads alone
		// ask it (a connection to listen on would only double the wait for its silence); the
		// first read that is answered is followed by a listen and a read.
		if silent == 0 {
			l.listen(ctx)
		}
		err := func() error {
			// A catalog that stalls (a network partition) is given up on and retried.
			ctx, cancel := context.WithTimeout(ctx, waitReadBound)
			defer cancel()
			if prefix == "" {
				key, err := c.cat.JobNotifyKey(ctx, id)
				if err != nil {
					return err
				}
				prefix = key + ":"
			}
			j, err := c.cat.Job(ctx, id)
			if err == nil {
				job = j
			}
			return err
		}()
		// A job read is reported even when ctx ended meanwhile: an ended job is not a timeout.
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return job, ctx.Err()
			case !CatalogUnreachable(err):
				return job, err
			}
			if catalog.IsTimeout(err) {
				silent++
			} else {
				silent = 0
			}
			if silent >= waitSilentReads {
				return job, fmt.Errorf("%w: %d reads of job %d in a row got no reply within %s", ErrNoAnswer, silent, id, bound)
			}
			failures++
			l.close() // its connection went with the catalog, most likely
			if !sleep(ctx, catalogRetry.Delay(failures, rand.Float64())) {
				return job, ctx.Err()
			}
			continue
		}
		failures, silent = 0, 0
		if progress != nil {
			progress(job)
		}
		if job.State.Terminal() {
			return job, nil
		}
		l.wait(ctx, prefix, tick)
		if ctx.Err() != nil {
			return job, ctx.Err()
		}
	}
}

const (
	// waitReadBound bounds each of Wait's reads of the job (the catalog's round-trip bound,
	// when shorter, bounds each of its statements).
	waitReadBound = 10 * time.Second
	// waitSilentReads is how many of Wait's reads in a row may get no reply before it gives
	// up: the first may have gone on a connection a failover left behind, the next go on
	// new ones.
	waitSilentReads = 3
)

// ErrNoAnswer marks a call that gave up because the catalog stopped answering (its round
// trips got no reply at all in time), as opposed to one it refused or answered.
var ErrNoAnswer = catalog.ErrNoAnswer

// jobListener is a pooled catalog connection that LISTENs on the job channel, for Wait. It
// is re-established after the catalog restarts; while it is not, Wait polls.
type jobListener struct {
	pool *pgxpool.Pool
	conn *pgxpool.Conn // nil while not listening
}

// listen LISTENs on a fresh connection unless listening already; failing, it leaves the
// waiter polling until the next try.
func (l *jobListener) listen(ctx context.Context) {
	if l.conn != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, waitReadBound)
	defer cancel()
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{catalog.ChannelJob}.Sanitize()); err != nil {
		conn.Conn().Close(context.Background()) //nolint:errcheck // broken; the pool drops it
		conn.Release()
		return
	}
	l.conn = conn
}

// wait returns once a notification about the job (prefix) arrives, after d, when ctx is
// done, or when the connection fails (it is then dropped, and listen tries again).
func (l *jobListener) wait(ctx context.Context, prefix string, d time.Duration) {
	if l.conn == nil {
		sleep(ctx, d)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := l.conn.Conn().WaitForNotification(wctx)
		switch {
		case err == nil && strings.HasPrefix(n.Payload, prefix):
			return
		case err == nil:
			continue
		case wctx.Err() == nil || l.conn.Conn().IsClosed():
			l.close() // the connection failed, not the wait
		}
		return
	}
}

// close gives the connection back to the pool without its LISTEN, or drops it when broken.
func (l *jobListener) close() {
	if l.conn == nil {
		return
	}
	if !l.conn.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := l.conn.Exec(ctx, "UNLISTEN *"); err != nil {
			l.conn.Conn().Close(ctx) //nolint:errcheck // the pool drops a closed connection
		}
		cancel()
	}
	l.conn.Release()
	l.conn = nil
}

// CatalogUnreachable reports whether err says the catalog could not be reached or went away
// during the call (it is restarting, failing over, starting up, or the network failed), as
// opposed to an answer (an unknown job, a refusal) that asking again would not change.
func CatalogUnreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"53300": // too many connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// sleep waits d unless ctx ends first, and reports whether it slept the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
