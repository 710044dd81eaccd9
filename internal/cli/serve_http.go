package cli

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/engine"
)

// httpOptions configure the API server of `serve --http`.
type httpOptions struct {
	addr, token string
	sessionIdle time.Duration
	maxSessions int
}

// checkHTTP refuses, before anything starts, an --http address that is not HOST:PORT. It
// fills in the /metrics token from the environment when the flag is not set.
func checkHTTP(o *httpOptions) error {
	if o.token == "" {
		o.token = os.Getenv("DECKHAND_HTTP_TOKEN")
	}
	if o.addr == "" {
		return nil
	}
	if err := api.CheckListen(o.addr); err != nil {
		return Usage("%v", err)
	}
	return nil
}

// startHTTP serves the API, the dashboard and /metrics on addr (when set) and registers the
// worker's metrics there. The server has a catalog pool of its own, so that dashboards
// never wait behind the worker's claims, nor slow them, and shares the worker's notifier.
// stop ends the server.
func (a *app) startHTTP(ctx context.Context, o httpOptions, cfg *engine.Config) (stop func(), err error) {
	if o.addr == "" {
		return func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = engine.NewMetrics(reg)
	client, err := a.serverClient(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := api.New(api.Config{Client: client, MetricsToken: o.token, SessionIdle: o.sessionIdle, MaxSessions: o.maxSessions,
		Registry: reg, Logger: slog.Default(), Notifier: cfg.Notifier})
	if err != nil {
		client.Close()
		return nil, Failed("%v", err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		client.Close()
		return nil, Failed("--http %s: %v", o.addr, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(sctx, ln); err != nil {
			slog.Error("HTTP server stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
		client.Close()
	}, nil
}
