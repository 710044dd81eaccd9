package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/notifier"
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
// Streams are subscribers of the process's notifier (Config.Notifier, shared with the worker
// in `deckhand serve`; else one the server opens with the first stream): one connection
// LISTENs on the catalog channel deckhand_job, whatever the number of streams. Each stream
// gets hello again whenever that connection is re-established, since notifications may have
// been missed meanwhile. The number of streams is capped by the catalog setting
// api_max_event_streams (default 100); a stream ends when its caller's session does.

// hub counts the open streams and runs the notifier when the server made its own.
// maxStreamsPerRole bounds one role's streams on a server, as maxSessionsPerRole bounds its
// sessions: a script of one role opening stream after stream cannot take every slot of
// api_max_event_streams from everyone else's dashboards.
const maxStreamsPerRole = 10

type hub struct {
	notifier *notifier.Notifier
	own      bool

	mu      sync.Mutex
	open    int
	byRole  map[string]int
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newHub(shared *notifier.Notifier, cfg *pgx.ConnConfig, log *slog.Logger) *hub {
	if shared != nil {
		return &hub{notifier: shared}
	}
	return &hub{notifier: notifier.New(cfg, log), own: true}
}

// subscribe opens a stream's subscription for role unless max streams are open already, or
// maxStreamsPerRole of the role's (then roleFull). Its buffer holds one hint: hints waiting
// for a slow stream merge into one.
func (h *hub) subscribe(max int, role string) (sub *notifier.Subscription, ok, roleFull bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open >= max {
		return nil, false, false
	}
	if h.byRole[role] >= maxStreamsPerRole {
		return nil, false, true
	}
	if h.own && !h.started && !h.stopped {
		h.started = true
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel, h.done = cancel, make(chan struct{})
		go func() { defer close(h.done); h.notifier.Run(ctx) }()
	}
	h.open++
	if h.byRole == nil {
		h.byRole = map[string]int{}
	}
	h.byRole[role]++
	return h.notifier.Subscribe(1, catalog.ChannelJob), true, false
}

func (h *hub) unsubscribe(sub *notifier.Subscription, role string) {
	sub.Close()
	h.mu.Lock()
	h.open--
	if h.byRole[role]--; h.byRole[role] <= 0 {
		delete(h.byRole, role)
	}
	h.mu.Unlock()
}

func (h *hub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// stop stops the server's own notifier; a shared one belongs to whoever made it.
func (h *hub) stop() {
	h.mu.Lock()
	h.stopped = true
	started := h.started
	h.mu.Unlock()
	if started {
		h.cancel()
		<-h.done
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
	role := sess.role
	sub, ok, roleFull := s.hub.subscribe(max, role)
	if roleFull {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("role %s has %d event streams open on this server, the most one role may: close one first", role, maxStreamsPerRole))
		return
	}
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("this server has %d event streams open, its limit (setting api_max_event_streams): try again later", max))
		return
	}
	defer s.hub.unsubscribe(sub, role)
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
		case <-sub.Resync():
			err = send("hello", `{"live":true}`)
		case <-sub.C():
			err = send("change", "{}")
		case now := <-tick.C:
			err = send("heartbeat", fmt.Sprintf(`{"time":%q}`, now.UTC().Format(time.RFC3339Nano)))
		}
		if err != nil {
			return
		}
		flusher.Flush()
	}
}
