package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/catalog"
)

// GET /api/events is a server-sent event stream:
//
//	event: hello      the stream is live; (re)load what you show, then apply job events
//	event: job        data: {"id": 42, "state": "running"} on every job state change
//	event: resync     events were dropped (a slow reader): reload what you show
//	event: heartbeat  data: {"time": "..."} every Config.Heartbeat
//
// One connection per server LISTENs on the catalog channel deckhand_job, whatever the
// number of streams; it is opened with the first stream and reconnects when lost, sending
// hello again since notifications may have been missed meanwhile.

type event struct{ name, data string }

type subscriber struct {
	ch   chan event
	lost atomic.Bool // an event was dropped because ch was full
}

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

// subscribe adds a stream and reports whether the listener is connected already (if not,
// the stream gets hello once it is).
func (h *hub) subscribe() (*subscriber, bool) {
	s := &subscriber{ch: make(chan event, 256)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started && h.ctx.Err() == nil {
		h.started = true
		go h.run()
	}
	h.subs[s] = struct{}{}
	return s, h.live
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

// broadcast never blocks: a stream that cannot keep up is told to resync instead.
func (h *hub) broadcast(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			s.lost.Store(true)
		}
	}
}

func (h *hub) setLive(live bool) {
	h.mu.Lock()
	h.live = live
	h.mu.Unlock()
	if live {
		h.broadcast(event{name: "hello", data: `{"live":true}`})
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
		n, err := conn.WaitForNotification(h.ctx)
		if err != nil {
			return true, err
		}
		idText, state, ok := strings.Cut(n.Payload, ":")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil {
			continue
		}
		data, _ := json.Marshal(StateChange{ID: id, State: state})
		h.broadcast(event{name: "job", data: string(data)})
	}
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported by this connection")
		return
	}
	// The server's timeouts are for ordinary requests; a stream lasts as long as its reader.
	// (A read deadline left in place would also end it: net/http's background read of the
	// idle connection fails at the deadline and cancels the request.)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	sub, live := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // let reverse proxies pass events through at once
	w.WriteHeader(http.StatusOK)
	send := func(ev event) error {
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
		return err
	}
	// Browsers reconnect after this many milliseconds when the stream breaks.
	fmt.Fprint(w, "retry: 2000\n\n")
	if live {
		_ = send(event{name: "hello", data: `{"live":true}`})
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
		case ev := <-sub.ch:
			err = send(ev)
		case now := <-tick.C:
			err = send(event{name: "heartbeat", data: fmt.Sprintf(`{"time":%q}`, now.UTC().Format(time.RFC3339Nano))})
		}
		if err == nil && sub.lost.Swap(false) {
			err = send(event{name: "resync", data: `{}`})
		}
		if err != nil {
			return
		}
		flusher.Flush()
	}
}
