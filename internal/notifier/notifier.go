// Package notifier shares one LISTEN connection among the parts of a process that wake on
// catalog notifications: the worker, the cleaner and the API's event streams.
//
// Notifications are hints; the catalog is the truth. One sent while the notifier is not
// listening (it is reconnecting, or a subscriber has just subscribed) is lost for good, so a
// subscriber is told to resync, to re-read what it needs from the catalog, as soon as all its
// channels are listened to: once after it subscribes and again after every reconnect. A
// subscriber that re-reads on resync and acts on notifications in between misses nothing.
//
// Delivery never blocks the notifier: each subscription has a buffer, and a notification that
// finds it full is dropped and counted. A subscriber that has notifications waiting in its
// buffer will look at the catalog anyway; the ones it lost only told it to do so.
package notifier

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// Notification is one NOTIFY as received.
type Notification struct {
	Channel string
	Payload string
}

// Notifier holds one connection that LISTENs to the channels its subscribers want, and
// reconnects with backoff when it is lost. Run drives it; Subscribe may be called before,
// during or after Run starts.
type Notifier struct {
	connConfig *pgx.ConnConfig
	log        *slog.Logger

	// MinBackoff is the wait before the first reconnect attempt, doubling after each failed
	// one up to MaxBackoff, and back to MinBackoff once connected; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// PingInterval is how long the connection may stay silent before it is pinged: a
	// connection that died without a word (a network partition) would otherwise wait for
	// notifications forever; default 10s.
	PingInterval time.Duration

	mu        sync.Mutex
	subs      map[*Subscription]struct{}
	byChannel map[string]map[*Subscription]struct{}
	listening map[string]bool // channels LISTENed on the current connection; nil while disconnected
	changed   bool            // subscriptions changed since the loop last synced its LISTENs
	interrupt func()          // ends the loop's wait for a notification; nil when not waiting
	pending   []func(context.Context, *pgx.Conn)
	pid       uint32
}

// New returns a notifier that connects with a copy of cfg.
func New(cfg *pgx.ConnConfig, log *slog.Logger) *Notifier {
	cfg = cfg.Copy()
	cfg.RuntimeParams["application_name"] = "deckhand notifier"
	// The loop interrupts its wait for notifications to LISTEN and UNLISTEN. Ending the wait
	// with a read deadline leaves the connection usable; a cancel request could instead reach
	// the server while the LISTEN that follows runs, and cancel it.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Notifier{
		connConfig: cfg,
		log:        log,
		subs:       map[*Subscription]struct{}{},
		byChannel:  map[string]map[*Subscription]struct{}{},
	}
}

// Subscribe starts delivering the notifications of channels to the returned subscription,
// keeping up to buffer of them (at least 1) until they are read. Call Close when done.
func (n *Notifier) Subscribe(buffer int, channels ...string) *Subscription {
	s := &Subscription{
		n:        n,
		channels: channels,
		c:        make(chan Notification, max(buffer, 1)),
		resync:   make(chan struct{}, 1),
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subs[s] = struct{}{}
	for _, ch := range channels {
		if n.byChannel[ch] == nil {
			n.byChannel[ch] = map[*Subscription]struct{}{}
		}
		n.byChannel[ch][s] = struct{}{}
	}
	// Even when every channel is listened to already, only the loop may say so: it may be
	// about to UNLISTEN one that its last subscriber left.
	n.changeLocked()
	return s
}

func (n *Notifier) unsubscribe(s *Subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.subs[s]; !ok {
		return
	}
	delete(n.subs, s)
	for _, ch := range s.channels {
		delete(n.byChannel[ch], s)
		if len(n.byChannel[ch]) == 0 {
			delete(n.byChannel, ch)
		}
	}
	n.changeLocked()
}

// changeLocked asks the loop to sync its LISTENs, interrupting its wait if it is waiting.
func (n *Notifier) changeLocked() {
	n.changed = true
	if n.interrupt != nil {
		n.interrupt()
	}
}

// PID is the server process id of the notifier's connection, 0 while it is not connected.
func (n *Notifier) PID() uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid
}

// Listening returns the channels that the notifier's connection listens to, as the server
// reports them (pg_listening_channels). It waits for the notifier to be connected.
func (n *Notifier) Listening(ctx context.Context) ([]string, error) {
	type answer struct {
		channels []string
		err      error
	}
	done := make(chan answer, 1)
	n.mu.Lock()
	n.pending = append(n.pending, func(ctx context.Context, conn *pgx.Conn) {
		rows, _ := conn.Query(ctx, `SELECT pg_catalog.pg_listening_channels()`)
		chs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		done <- answer{chs, err}
	})
	n.changeLocked()
	n.mu.Unlock()
	select {
	case a := <-done:
		return a.channels, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run listens until ctx is done, reconnecting with backoff whenever the connection is lost.
// Call it once.
func (n *Notifier) Run(ctx context.Context) {
	minB := orDefault(n.MinBackoff, 100*time.Millisecond)
	maxB := orDefault(n.MaxBackoff, 5*time.Second)
	delay := minB
	for {
		listened, err := n.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			delay = minB
		}
		// Jitter spreads the reconnects of many processes after the catalog restarts.
		wait := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
		n.log.Warn("catalog notification listener lost; reconnecting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		delay = min(2*delay, maxB)
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// session connects, listens and delivers until the connection fails or ctx is done. It
// reports whether it got as far as listening, which resets the backoff.
func (n *Notifier) session(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, n.connConfig)
	if err != nil {
		return false, err
	}
	n.mu.Lock()
	n.listening = map[string]bool{}
	n.pid = conn.PgConn().PID()
	n.mu.Unlock()
	defer func() {
		n.disconnected()
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx) //nolint:errcheck // the connection is being abandoned either way
	}()
	for {
		if err := n.sync(ctx, conn); err != nil {
			return listened, err
		}
		listened = true
		note, err := n.wait(ctx, conn)
		if err != nil {
			return listened, err
		}
		if note != nil {
			n.deliver(Notification{Channel: note.Channel, Payload: note.Payload})
		}
	}
}

// disconnected forgets the connection's LISTENs: every subscriber will be told to resync once
// the next connection listens to its channels.
func (n *Notifier) disconnected() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.listening = nil
	n.pid = 0
	for s := range n.subs {
		s.live = false
	}
}

// sync makes the connection listen to exactly the channels subscribers want, then tells each
// subscriber whose channels are now all listened to, and that was not told yet on this
// connection, to resync. Then it runs what waits for the connection (Listening).
func (n *Notifier) sync(ctx context.Context, conn *pgx.Conn) error {
	n.mu.Lock()
	n.changed = false
	have := maps.Clone(n.listening)
	var listen, unlisten []string
	for ch := range n.byChannel {
		if !have[ch] {
			listen = append(listen, ch)
		}
	}
	for ch := range have {
		if n.byChannel[ch] == nil {
			unlisten = append(unlisten, ch)
		}
	}
	n.mu.Unlock()

	for _, ch := range listen {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		have[ch] = true
	}
	for _, ch := range unlisten {
		if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		delete(have, ch)
	}

	n.mu.Lock()
	n.listening = have
	for s := range n.subs {
		if !s.live && s.listenedIn(have) {
			s.live = true
			select {
			case s.resync <- struct{}{}:
			default: // one waiting resync is as good as two
			}
		}
	}
	pending := n.pending
	n.pending = nil
	n.mu.Unlock()
	for _, f := range pending {
		f(ctx, conn)
	}
	return nil
}

// wait returns the next notification, or nil when it was interrupted to sync subscriptions or
// the connection was silent for PingInterval and answered a ping.
func (n *Notifier) wait(ctx context.Context, conn *pgx.Conn) (*pgconn.Notification, error) {
	wctx, cancel := context.WithTimeout(ctx, orDefault(n.PingInterval, 10*time.Second))
	defer cancel()
	n.mu.Lock()
	if n.changed {
		n.mu.Unlock()
		return nil, nil
	}
	n.interrupt = cancel
	n.mu.Unlock()
	note, err := conn.WaitForNotification(wctx)
	n.mu.Lock()
	n.interrupt = nil
	n.mu.Unlock()
	switch {
	case err == nil:
		return note, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() == nil || conn.IsClosed():
		return nil, err // the connection failed
	case errors.Is(wctx.Err(), context.DeadlineExceeded):
		pctx, cancel := context.WithTimeout(ctx, orDefault(n.PingInterval, 10*time.Second))
		defer cancel()
		return nil, conn.Ping(pctx)
	default:
		return nil, nil // interrupted by a subscription change
	}
}

// deliver hands a notification to the subscribers of its channel without ever waiting.
func (n *Notifier) deliver(note Notification) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.byChannel[note.Channel] {
		select {
		case s.c <- note:
		default:
			// Some subscribers drop on purpose (a buffer of one merges hints), so this is
			// no warning.
			if s.dropped.Add(1) == 1 {
				n.log.Debug("a notification subscriber's buffer is full; dropping notifications", "channels", s.channels)
			}
		}
	}
}
