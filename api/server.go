// Package api serves deckhand over HTTP: a JSON API under /api/, a live dashboard (embedded
// assets only), Prometheus metrics at /metrics and a health check at /healthz. It reads and
// writes the catalog only through package catalog and engine.Client, like the CLI.
//
// Further sections (exports, the cleanup queue, ...) are added with Server.AddPage: one call
// registers GET /api/<name> and a page of the dashboard that lists what it returns.
package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/notifier"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
)

// Config configures a Server.
type Config struct {
	// Client is the server's own catalog client, used only for what belongs to no caller:
	// the catalog-wide counts (/metrics, /api/summary), the notification listener behind
	// /api/events when Notifier is nil, settings, and /healthz. Every other request runs on a
	// client of the caller's role, opened from this client's conninfo with the caller's user
	// and password.
	// Give the server a client of its own rather than the worker's: then the dashboard never
	// queues behind a busy worker's claims, nor slows them.
	Client *engine.Client
	// MetricsToken, when set, is required by /metrics as "Authorization: Bearer <token>".
	// Without it, /metrics answers only requests from this machine.
	MetricsToken string
	// SessionIdle ends a browser session unused this long; default 12h.
	SessionIdle time.Duration
	// MaxSessions bounds the browser sessions signed in at once; default 100. Each holds up
	// to three catalog connections while in use.
	MaxSessions int
	// LoginPerAddress and LoginPerRole bound failed sign-ins (the form, and HTTP Basic
	// credentials not seen before) per client address and per role name; defaults 5 at once
	// then one every 12s, and 10 at once then one every 6s.
	LoginPerAddress, LoginPerRole Limit
	// Now replaces the clock of sessions, sign-in limits and cached settings in tests.
	Now func() time.Time
	// Registry is served at /metrics; the catalog gauges are registered on it. Register the
	// workers' engine.Metrics on the same registry. Nil means a new, empty registry.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Heartbeat is how often /api/events writes a heartbeat; default 15s.
	Heartbeat time.Duration
	// StatsMaxAge bounds how stale catalog-wide counts may be; default 1s. The server reads
	// them at most this often whatever the number of dashboards and scrapers, and less often
	// when reading them gets slow (see statsCache).
	StatsMaxAge time.Duration
	// Pages are extra sections of the API and the dashboard.
	Pages []Page
	// Notifier is the process's catalog notification listener, which /api/events subscribes
	// to; `deckhand serve` shares the worker's. Nil: the server opens its own with the first
	// stream, on Client's conninfo, and closes it in Close.
	Notifier *notifier.Notifier
}

// Server is the HTTP API, dashboard and metrics endpoint.
type Server struct {
	cfg        Config
	client     *engine.Client
	log        *slog.Logger
	mux        *http.ServeMux
	stats      *statsCache
	hub        *hub
	reg        *prometheus.Registry
	sessions   *sessionStore
	limits     *loginLimits
	maxStreams *intSetting
	secret     []byte // keys the cache of Basic credentials

	mu    sync.Mutex
	pages []Page

	closing chan struct{}
	close   sync.Once
	janitor chan struct{} // closed when the session sweeper has stopped
}

// New builds a server. Call Close when done to end event streams and release the
// notification listener.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("api: Config.Client is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.StatsMaxAge <= 0 {
		cfg.StatsMaxAge = time.Second
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = 12 * time.Hour
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 100
	}
	if cfg.LoginPerAddress.Burst <= 0 || cfg.LoginPerAddress.Every <= 0 {
		cfg.LoginPerAddress = Limit{Burst: 5, Every: 12 * time.Second}
	}
	if cfg.LoginPerRole.Burst <= 0 || cfg.LoginPerRole.Every <= 0 {
		cfg.LoginPerRole = Limit{Burst: 10, Every: 6 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg:     cfg,
		client:  cfg.Client,
		log:     cfg.Logger,
		mux:     http.NewServeMux(),
		reg:     cfg.Registry,
		secret:  make([]byte, 32),
		closing: make(chan struct{}),
		janitor: make(chan struct{}),
		sessions: &sessionStore{now: cfg.Now, idle: cfg.SessionIdle, basicTTL: basicTTL,
			maxSessions: cfg.MaxSessions, maxBasic: maxBasic, m: map[string]*session{}},
		limits: &loginLimits{byAddr: newLimiter(cfg.LoginPerAddress, cfg.Now), byRole: newLimiter(cfg.LoginPerRole, cfg.Now)},
		maxStreams: &intSetting{cat: cfg.Client.Catalog(), name: "api_max_event_streams", def: 100,
			ttl: 5 * time.Second, now: cfg.Now, log: cfg.Logger},
	}
	if _, err := rand.Read(s.secret); err != nil {
		return nil, err
	}
	s.stats = &statsCache{cat: cfg.Client.Catalog(), minAge: cfg.StatsMaxAge}
	s.hub = newHub(cfg.Notifier, cfg.Client.Catalog().Pool.Config().ConnConfig, cfg.Logger)
	if err := s.reg.Register(newCatalogCollector(s.stats, cfg.Client.Catalog())); err != nil {
		return nil, err
	}
	if err := s.reg.Register(newAPICollector(s)); err != nil {
		return nil, err
	}
	s.routes()
	for _, p := range append(s.builtinPages(), cfg.Pages...) {
		if err := s.AddPage(p); err != nil {
			return nil, err
		}
	}
	go s.sweep()
	return s, nil
}

// basicTTL is how long checked Basic credentials are trusted before being checked again,
// and maxBasic how many distinct credentials are kept at once (the oldest give way).
const (
	basicTTL = 2 * time.Minute
	maxBasic = 50
)

// sweep ends expired sessions every minute, closing their catalog connections; a request
// with an expired session ends it at once anyway.
func (s *Server) sweep() {
	defer close(s.janitor)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.sessions.sweep()
		}
	}
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}}))

	s.mux.HandleFunc("GET /api/jobs", s.listJobs)
	s.mux.HandleFunc("POST /api/jobs", s.submitJob)
	s.mux.HandleFunc("GET /api/jobs/{id}", s.getJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/cancel", s.cancelJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/retry", s.retryJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/pause", s.pauseJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/resume", s.resumeJob)
	s.mux.HandleFunc("GET /api/nodes", s.listNodes)
	s.mux.HandleFunc("GET /api/workers", s.listWorkers)
	s.mux.HandleFunc("GET /api/summary", s.summary)
	s.mux.HandleFunc("GET /api/events", s.events)
	s.mux.HandleFunc("GET /api/meta", s.meta)
	s.mux.HandleFunc("/api/", s.noEndpoint)

	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.Handle("GET /assets/", assetHandler())
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/", http.StatusSeeOther) })
	s.mux.HandleFunc("POST /logout", s.logout)
}

// noEndpoint answers a request under /api/ that no endpoint takes: 405 with Allow when the
// path is an endpoint's under another method (GET of a cancel), else 404.
func (s *Server) noEndpoint(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		other := r.Clone(r.Context())
		other.Method = m
		if _, pattern := s.mux.Handler(other); pattern != "" && pattern != "/api/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: this endpoint takes %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
}

// Handler is the server's root handler: every route behind authentication and the
// cross-site request checks.
func (s *Server) Handler() http.Handler { return s.wrap(s.mux) }

// Handle registers an extra endpoint, such as "GET /api/exports/{id}", behind the same
// authentication as the rest; CallerClient(r) is the caller's catalog client.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Close ends open event streams and sessions, closing their catalog connections, and stops
// listening to the catalog.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.closing)
		<-s.janitor
		s.hub.stop()
		s.sessions.closeAll()
	})
}

// ListenAndServe serves on addr until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down within a few seconds.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute, // /api/events lifts it for its own stream
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("serving the API and dashboard", "url", "http://"+ln.Addr().String()+"/", "metrics_token", s.cfg.MetricsToken != "")
	if !loopbackHost(hostOnly(ln.Addr().String())) {
		s.log.Warn("serving beyond this machine over plain HTTP: sign-in passwords cross the network unencrypted unless a TLS proxy is in front")
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	// Event streams never go idle on their own: end them before waiting for the rest.
	s.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return hs.Close()
	}
	return nil
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError writes {"error": msg} with msg on one line, as the CLI prints errors.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": spec.OneLine(msg)})
}

// serverError tells the client in one line why its request failed: 403 with the catalog's
// message when the catalog refused the caller's role, 502 when a node a submission had to
// check could not be asked, 503 when the catalog or such a node did not answer in time, else
// 500, logged in full.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && !errors.Is(context.Cause(r.Context()), errCatalogTimeout) {
		return // the client went away; nothing to tell
	}
	var pgErr *pgconn.PgError
	if refusedByCatalog(err) {
		msg := err.Error()
		if errors.As(err, &pgErr) {
			msg = catalog.ExplainRefusal(pgErr.Message)
		}
		writeError(w, http.StatusForbidden, nodeconn.Redact(msg))
		return
	}
	// A node that a submission had to ask (the owner roles on it) could not be reached or
	// refused the node's registered user: the node's problem, told as such. Its
	// authentication errors say nothing of the caller's own catalog session.
	var nodeErr *engine.NodeCheckError
	if errors.As(err, &nodeErr) && (r.Context().Err() != nil || timedOut(err)) {
		// It did not answer before the request's deadline or its own check timeout: told as
		// the catalog not answering is, for a deadline ended the wait either way and asking
		// again later may well work. The node is named, as the catalog is there.
		s.log.Warn("api request failed: a node did not answer", "method", r.Method, "path", r.URL.Path, "node", nodeErr.Node,
			"err", nodeconn.Redact(err.Error()))
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("node %s did not answer in time: %s", nodeErr.Node, nodeconn.Redact(taskerr.ConnectMessage(err))))
		return
	}
	if errors.As(err, &nodeErr) {
		s.log.Warn("api request failed on a node", "method", r.Method, "path", r.URL.Path, "node", nodeErr.Node, "err", nodeconn.Redact(err.Error()))
		writeError(w, http.StatusBadGateway, nodeconn.Redact(taskerr.ConnectMessage(err)))
		return
	}
	// The catalog no longer lets the caller's role in (its password changed, or it may no
	// longer log in): the session is over, whatever its connections still open allowed.
	if sess := callerOf(r); sess != nil && errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28") {
		go s.sessions.remove(sess.key)
		writeError(w, http.StatusUnauthorized, "your session has ended: sign in again")
		return
	}
	// The catalog could not be reached or went away (restarting, failing over, the network):
	// asking again later may well work.
	if engine.CatalogUnreachable(err) {
		s.log.Warn("api request failed: the catalog did not answer", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusServiceUnavailable, "the catalog did not answer: "+nodeconn.Redact(err.Error()))
		return
	}
	s.log.Warn("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, nodeconn.Redact(err.Error()))
}

// timedOut reports whether err ended a wait for a server at a deadline: a context's, or a
// network timeout (a conninfo's connect_timeout).
func timedOut(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || errors.As(err, &netErr) && netErr.Timeout()
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("serving metrics: " + fmt.Sprint(v...)) }

// refusedByCatalog reports whether the catalog refused the caller's role
// (insufficient_privilege): a table it may not touch, a job it may not act on. A node that
// refused its registered user the same way (no CONNECT on its database) refused nothing of
// the caller's: that is the node's problem.
func refusedByCatalog(err error) bool {
	var nodeErr *engine.NodeCheckError
	if errors.As(err, &nodeErr) {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.Is(err, catalog.ErrForbidden) || errors.As(err, &pgErr) && pgErr.Code == "42501"
}
