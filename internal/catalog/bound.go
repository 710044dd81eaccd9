package catalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoAnswer marks a call that gave up on the catalog because one of its round trips got no
// reply at all within the bound (see Options.BoundRoundTrips): the server stopped, or the
// network between drops packets without resetting the connection. Unlike a refused
// connection or a restart, nothing says when it will answer again.
var ErrNoAnswer = errors.New("the catalog stopped answering")

// Options change how OpenWith connects.
type Options struct {
	// BoundRoundTrips ends a statement (query, batch, prepare, copy) whose catalog stopped
	// answering. A statement on a connection whose peer went silent otherwise waits for ever:
	// the kernel retransmits for a quarter of an hour before it gives up, and TCP keepalives
	// are not sent while a statement is unanswered. Each time a statement has waited as long
	// as a connection may take to be made (the conninfo's connect_timeout, else
	// DefaultConnectTimeout), a new connection asks the server whether the statement's
	// backend is still at work on it: a statement that is merely slow (a large submission, a
	// cancel of a large job) goes on; one the server does not answer about, or whose backend
	// is no longer running it (the request or its reply was lost on the way), ends. It is for
	// short-lived callers (the command line); a waiting loop stays possible as many round
	// trips. Waiting for notifications is not bounded: its callers bound it themselves.
	BoundRoundTrips bool
}

// roundTripBound is the pgx tracer that bounds each statement of a pool's connections, and
// counts those that got no reply in time.
type roundTripBound struct {
	d      time.Duration
	probe  *pgconn.Config // how to reach the catalog to ask about a statement (see busy)
	silent atomic.Int64   // statements that got no reply in time
}

var (
	_ pgx.QueryTracer    = (*roundTripBound)(nil)
	_ pgx.BatchTracer    = (*roundTripBound)(nil)
	_ pgx.PrepareTracer  = (*roundTripBound)(nil)
	_ pgx.CopyFromTracer = (*roundTripBound)(nil)
)

type boundKey struct{}

// bounded is a statement's context, which watch ends as a deadline would once the catalog
// stopped answering, so that to pgx and to every caller that reads as a timeout; nil in the
// tracer's context when a deadline of the caller's comes first.
type bounded struct {
	context.Context // the caller's
	done            chan struct{}
	stop            chan struct{} // closed when the statement ends
	mu              sync.Mutex
	err             error
	silenced        bool // ended by watch
}

func (c *bounded) Done() <-chan struct{} { return c.done }

func (c *bounded) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end ends the context with err, unless it ended already.
func (c *bounded) end(err error, silenced bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err, c.silenced = err, silenced
		close(c.done)
	}
}

func (b *roundTripBound) start(ctx context.Context, conn *pgx.Conn) context.Context {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= b.d {
		// The caller's own deadline is the shorter: it decides, and what ends at it is the
		// caller's timeout, not a catalog that stopped answering.
		return context.WithValue(ctx, boundKey{}, (*bounded)(nil))
	}
	c := &bounded{Context: ctx, done: make(chan struct{}), stop: make(chan struct{})}
	go b.watch(c, conn.PgConn().PID(), conn.PgConn().Conn().RemoteAddr())
	return context.WithValue(c, boundKey{}, c)
}

// watch ends c, as a deadline would, once after a bound's wait the catalog does not say
// that backend pid, of the server at addr, is still at work on the statement; or as the
// caller's context ends.
func (b *roundTripBound) watch(c *bounded, pid uint32, addr net.Addr) {
	t := time.NewTimer(b.d)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.Context.Done():
			c.end(c.Context.Err(), false)
			return
		case <-t.C:
		}
		if !b.busy(c.Context, pid, addr) {
			// Exactly the deadline's error: pgx tells a timeout from a cancel by it.
			c.end(context.DeadlineExceeded, true)
			return
		}
		t.Reset(b.d)
	}
}

func (b *roundTripBound) end(ctx context.Context, err error) {
	c, _ := ctx.Value(boundKey{}).(*bounded)
	if c == nil {
		return
	}
	close(c.stop)
	c.end(context.Canceled, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.silenced {
		b.silent.Add(1)
	}
}

// busySQL counts the backend's running statement, if it runs one; every name is
// pg_catalog's, whatever objects other roles created in the catalog's database.
const busySQL = `SELECT count(*) FROM pg_catalog.pg_stat_activity
	WHERE pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4 AND state OPERATOR(pg_catalog.=) 'active'::pg_catalog.text
	  AND wait_event IS DISTINCT FROM 'ClientWrite'::pg_catalog.text`

// busy asks the catalog server at addr, on a connection of its own made within the bound,
// whether backend pid is running a statement, other than blocked on sending its reply (which
// a silent network leaves it doing). No answer, or any other, means the statement's round
// trip is lost.
func (b *roundTripBound) busy(ctx context.Context, pid uint32, addr net.Addr) bool {
	if b.probe == nil || pid == 0 || addr == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	// The server the statement's connection reached, whichever of the conninfo's hosts
	// answers first now: another (a standby, a host that was down) does not know the pid,
	// or knows it as another backend. Each host's TLS settings stay as the conninfo says.
	probe := b.probe.Copy()
	dial := probe.DialFunc
	probe.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial(ctx, addr.Network(), addr.String())
	}
	conn, err := pgconn.ConnectConfig(ctx, probe)
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	res := conn.ExecParams(ctx, busySQL, [][]byte{[]byte(strconv.FormatUint(uint64(pid), 10))}, nil, nil, nil).Read()
	return res.Err == nil && len(res.Rows) == 1 && string(res.Rows[0][0]) == "1"
}

func (b *roundTripBound) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return b.start(ctx, conn)
}

func (b *roundTripBound) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return b.start(ctx, conn)
}

func (b *roundTripBound) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (b *roundTripBound) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TracePrepareStart(ctx context.Context, conn *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return b.start(ctx, conn)
}

func (b *roundTripBound) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return b.start(ctx, conn)
}

func (b *roundTripBound) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromEndData) {
	b.end(ctx, d.Err)
}

// RoundTripBound is how long each statement of c may wait for its reply: 0 when c was opened
// without Options.BoundRoundTrips.
func (c *Catalog) RoundTripBound() time.Duration {
	if c.bound == nil {
		return 0
	}
	return c.bound.d
}

// NoAnswer returns err wrapped in ErrNoAnswer, naming the bound, when err is a timeout and a
// round trip of c got no reply within its bound (or a new connection none within its
// connect_timeout after one did); otherwise err unchanged. Callers call it on what they
// are about to report, so that the user reads that the catalog stopped answering rather than
// "context deadline exceeded".
func (c *Catalog) NoAnswer(err error) error {
	if err == nil || c.bound == nil || errors.Is(err, ErrNoAnswer) || !IsTimeout(err) || c.bound.silent.Load() == 0 {
		return err
	}
	return &noAnswerError{bound: c.bound.d, err: err}
}

// IsTimeout reports whether err is a call ended by a deadline (its own, or pgx's on a
// connection) rather than by an answer.
func IsTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

type noAnswerError struct {
	bound time.Duration
	err   error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("%v: no reply within %s (the conninfo's connect_timeout bounds each round trip)", ErrNoAnswer, e.bound)
}

func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }
