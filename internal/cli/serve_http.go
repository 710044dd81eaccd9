package cli

import (
	"context"
	"log/slog"
	"net"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/engine"
)

// checkHTTP refuses, before anything starts, an --http address that would expose the API
// beyond this machine without a token. It returns the token to use (flag, else environment).
func checkHTTP(addr, token string) (string, error) {
	if token == "" {
		token = os.Getenv("DECKHAND_HTTP_TOKEN")
	}
	if addr == "" {
		return token, nil
	}
	if err := api.CheckListen(addr, token); err != nil {
		return "", Usage("%v", err)
	}
	return token, nil
}

// startHTTP serves the API, the dashboard and /metrics on addr (when set) and registers the
// worker's metrics there. The server has a catalog pool of its own, so that dashboards
// never wait behind the worker's claims, nor slow them. stop ends the server.
func (a *app) startHTTP(ctx context.Context, addr, token string, cfg *engine.Config) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = engine.NewMetrics(reg)
	client, err := a.client(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := api.New(api.Config{Client: client, Token: token, Registry: reg, Logger: slog.Default()})
	if err != nil {
		client.Close()
		return nil, Failed("%v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		client.Close()
		return nil, Failed("--http %s: %v", addr, err)
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
