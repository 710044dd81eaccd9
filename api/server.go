// Package api serves deckhand over HTTP: a JSON API under /api/, a live dashboard (embedded
// assets only), Prometheus metrics at /metrics and a health check at /healthz. It reads and
// writes the catalog only through package catalog and engine.Client, like the CLI.
//
// Further sections (exports, the cleanup queue, ...) are added with Server.AddPage: one call
// registers GET /api/<name> and a page of the dashboard that lists what it returns.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deckhandhq/deckhand/engine"
)

// Config configures a Server.
type Config struct {
	// Client reaches the catalog. Give the server a client of its own rather than the
	// worker's: then the dashboard never queues behind a busy worker's claims, nor slows them.
	Client *engine.Client
	// Token, when set, is required by everything but /healthz: as "Authorization: Bearer
	// <token>", or as the session cookie a browser gets by logging in (see auth.go).
	Token string
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
}

// Server is the HTTP API, dashboard and metrics endpoint.
type Server struct {
	cfg    Config
	client *engine.Client
	log    *slog.Logger
	mux    *http.ServeMux
	auth   *authenticator
	stats  *statsCache
	hub    *hub
	reg    *prometheus.Registry

	mu    sync.Mutex
	pages []Page

	closing chan struct{}
	close   sync.Once
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
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg:     cfg,
		client:  cfg.Client,
		log:     cfg.Logger,
		mux:     http.NewServeMux(),
		auth:    newAuthenticator(cfg.Token),
		reg:     cfg.Registry,
		closing: make(chan struct{}),
	}
	s.stats = &statsCache{cat: cfg.Client.Catalog, minAge: cfg.StatsMaxAge}
	s.hub = newHub(cfg.Client.Catalog.Pool.Config().ConnConfig, cfg.Logger)
	if err := s.reg.Register(newCatalogCollector(s.stats, cfg.Client.Catalog)); err != nil {
		return nil, err
	}
	s.routes()
	for _, p := range append(s.builtinPages(), cfg.Pages...) {
		if err := s.AddPage(p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}}))

	s.mux.HandleFunc("GET /api/jobs", s.listJobs)
	s.mux.HandleFunc("POST /api/jobs", s.submitJob)
	s.mux.HandleFunc("GET /api/jobs/{id}", s.getJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/cancel", s.cancelJob)
	s.mux.HandleFunc("POST /api/jobs/{id}/retry", s.retryJob)
	s.mux.HandleFunc("GET /api/nodes", s.listNodes)
	s.mux.HandleFunc("GET /api/workers", s.listWorkers)
	s.mux.HandleFunc("GET /api/summary", s.summary)
	s.mux.HandleFunc("GET /api/events", s.events)
	s.mux.HandleFunc("GET /api/meta", s.meta)
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})

	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.Handle("GET /assets/", assetHandler())
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
}

// Handler is the server's root handler: every route behind authentication and the
// cross-site request checks.
func (s *Server) Handler() http.Handler { return s.auth.wrap(s.mux) }

// Handle registers an extra endpoint, such as "GET /api/exports/{id}", behind the same
// authentication as the rest.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Close ends open event streams and stops listening to the catalog.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.closing)
		s.hub.stop()
	})
}

// ListenAndServe serves on addr until ctx is done. It refuses a non-loopback addr without
// a token (see CheckListen).
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if err := CheckListen(addr, s.cfg.Token); err != nil {
		return err
	}
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
	s.log.Info("serving the API and dashboard", "url", "http://"+ln.Addr().String()+"/", "token", s.cfg.Token != "")
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
	writeJSON(w, code, map[string]string{"error": strings.Join(strings.Fields(msg), " ")})
}

// serverError logs the full error and tells the client in one line.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away; nothing to tell
	}
	s.log.Warn("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, RedactConninfo(err.Error()))
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("serving metrics: " + fmt.Sprint(v...)) }
