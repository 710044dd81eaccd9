package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/catalog"
)

// GET /api/events is a server-sent event stream of hints:
//
//	event: hello      the stream is live: (re)load what you show
//	event: change     some job changed state: re-read what you show
//	event: heartbeat  data: {"time": "..."} every Config.Heartbeat
//
// A change says nothing of which job changed, nor how. The catalog decides which jobs each
// role may see, and one listener hears every job's notifications: a stream that passed them
// on would tell every subscriber about every job. Filtering them per subscriber would cost a
// catalog query per notification and per stream, on the subscriber's own connections, while
// the dashboard re-reads the page on screen anyway, at most once a second, through the same
// endpoints it loaded it from, which show the caller only what its role may see. So a hint
// carries nothing, and hints waiting for a slow stream merge into one: one is as good as many.
//
// One connection per server LISTENs on the catalog channel deckhand_job, whatever the
// number of streams; it is opened with the first stream and reconnects when lost, sending
// hello again since notifications may have been missed meanwhile. The number of streams is
// capped by the catalog setting api_max_event_streams (default 100); a stream ends when
// its caller's session does.

type subscriber struct {
	ch   chan string // the next event's name; holds one, since hints merge
	role string
}

// maxStreamsPerRole bounds one role's streams on a server, as maxSessionsPerRole bounds its
// sessions: a script of one role opening stream after stream cannot take every slot of
// api_max_event_streams from everyone else's dashboards.
const maxStreamsPerRole = 10

type hub struct {
	connCfg *pgx.ConnConfig
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	live    bool
	started bool
}

func newHub(cfg *pgx.ConnConfig, log *slog.Logger) *hub {
	cfg = cfg.Copy()
	cfg.RuntimeParams["application_name"] = "deckhand api events"
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{connCfg: cfg, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), subs: map[*subscriber]struct{}{}}
}

// subscribe adds a stream of role unless max are open already, or maxStreamsPerRole of the
// role's (then roleFull), and reports whether the listener is connected already (if not, the
// stream gets hello once it is).
func (h *hub) subscribe(max int, role string) (sub *subscriber, live, ok, roleFull bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= max {
		return nil, false, false, false
	}
	n := 0
	for s := range h.subs {
		if s.role == role {
			n++
		}
	}
	if n >= maxStreamsPerRole {
		return nil, false, false, true
	}
	if !h.started && h.ctx.Err() == nil {
		h.started = true
		go h.run()
	}
	sub = &subscriber{ch: make(chan string, 1), role: role}
	h.subs[sub] = struct{}{}
	return sub, h.live, true, false
}

func (h *hub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

func (h *hub) stop() {
	h.mu.Lock()
	started := h.started
	h.cancel()
	h.mu.Unlock()
	if started {
		<-h.done
	}
}

// broadcast never blocks: a stream with an event still waiting has nothing more to learn.
func (h *hub) broadcast(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- name:
		default:
		}
	}
}

func (h *hub) setLive(live bool) {
	h.mu.Lock()
	h.live = live
	h.mu.Unlock()
	if live {
		h.broadcast("hello")
	}
}

func (h *hub) run() {
	defer close(h.done)
	backoff := 250 * time.Millisecond
	for h.ctx.Err() == nil {
		connected, err := h.listen()
		h.setLive(false)
		if h.ctx.Err() != nil {
			return
		}
		if connected {
			backoff = 250 * time.Millisecond
		}
		h.log.Warn("event stream lost its catalog listener; reconnecting", "err", err, "in", backoff)
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (h *hub) listen() (connected bool, err error) {
	conn, err := pgx.ConnectConfig(h.ctx, h.connCfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	if _, err := conn.Exec(h.ctx, "LISTEN "+pgx.Identifier{catalog.ChannelJob}.Sanitize()); err != nil {
		return false, err
	}
	h.setLive(true)
	for {
		if _, err := conn.WaitForNotification(h.ctx); err != nil {
			return true, err
		}
		h.broadcast("change")
	}
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	sess := callerOf(r)
	max := s.maxStreams.get(r.Context())
	sub, live, ok, roleFull := s.hub.subscribe(max, sess.role)
	if roleFull {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("role %s has %d event streams open on this server, the most one role may: close one first", sess.role, maxStreamsPerRole))
		return
	}
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("this server has %d event streams open, its limit (setting api_max_event_streams): try again later", max))
		return
	}
	defer s.hub.unsubscribe(sub)
	// The server's timeouts are for ordinary requests; a stream lasts as long as its reader.
	// (A read deadline left in place would also end it: net/http's background read of the
	// idle connection fails at the deadline and cancels the request.)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // let reverse proxies pass events through at once
	w.WriteHeader(http.StatusOK)
	send := func(name, data string) error {
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		return err
	}
	// Browsers reconnect after this many milliseconds when the stream breaks.
	fmt.Fprint(w, "retry: 2000\n\n")
	if live {
		_ = send("hello", `{"live":true}`)
	}
	flusher.Flush()

	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-sess.done:
			return
		case name := <-sub.ch:
			data := "{}"
			if name == "hello" {
				data = `{"live":true}`
			}
			err = send(name, data)
		case now := <-tick.C:
			err = send("heartbeat", fmt.Sprintf(`{"time":%q}`, now.UTC().Format(time.RFC3339Nano)))
		}
		if err != nil {
			return
		}
		flusher.Flush()
	}
}
