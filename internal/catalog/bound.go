package catalog

import (
	"context"
	"errors"
	"fmt"
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
	// BoundRoundTrips gives every statement (query, batch, prepare, copy) as long to be
	// answered as a connection has to be made: the conninfo's connect_timeout, else
	// DefaultConnectTimeout. A statement on a connection whose peer went silent otherwise
	// waits for ever: the kernel retransmits for a quarter of an hour before it gives up, and
	// TCP keepalives are not sent while a statement is unanswered. It is for short-lived
	// callers (the command line), whose catalog statements are all short; a waiting loop
	// stays possible as many bounded round trips. Waiting for notifications is not bounded:
	// its callers bound it themselves.
	BoundRoundTrips bool
}

// roundTripBound is the pgx tracer that bounds each statement of a pool's connections, and
// counts those that got no reply in time.
type roundTripBound struct {
	d      time.Duration
	silent atomic.Int64 // statements that got no reply in time
}

var (
	_ pgx.QueryTracer    = (*roundTripBound)(nil)
	_ pgx.BatchTracer    = (*roundTripBound)(nil)
	_ pgx.PrepareTracer  = (*roundTripBound)(nil)
	_ pgx.CopyFromTracer = (*roundTripBound)(nil)
)

// errRoundTrip is the cause of a statement's context ending at the bound.
var errRoundTrip = errors.New("no reply within the catalog's round-trip bound")

type boundKey struct{}

// bounded is what start leaves in the statement's context for end; nil when a deadline of
// the caller's already came first.
type bounded struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (b *roundTripBound) start(ctx context.Context) context.Context {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= b.d {
		// The caller's own deadline is the shorter: it decides, and what ends at it is the
		// caller's timeout, not a catalog that stopped answering.
		return context.WithValue(ctx, boundKey{}, (*bounded)(nil))
	}
	bctx, cancel := context.WithTimeoutCause(ctx, b.d, errRoundTrip)
	return context.WithValue(bctx, boundKey{}, &bounded{ctx: bctx, cancel: cancel})
}

func (b *roundTripBound) end(ctx context.Context, err error) {
	s, _ := ctx.Value(boundKey{}).(*bounded)
	if s == nil {
		return
	}
	if err != nil && errors.Is(context.Cause(s.ctx), errRoundTrip) {
		b.silent.Add(1)
	}
	s.cancel()
}

func (b *roundTripBound) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return b.start(ctx)
}

func (b *roundTripBound) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return b.start(ctx)
}

func (b *roundTripBound) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (b *roundTripBound) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return b.start(ctx)
}

func (b *roundTripBound) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	b.end(ctx, d.Err)
}

func (b *roundTripBound) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return b.start(ctx)
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
