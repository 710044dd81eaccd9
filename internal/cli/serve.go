package cli

import (
	"context"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/notifier"
)

func (a *app) serveCommand() *cobra.Command {
	var cfg engine.Config
	var httpOpts httpOptions
	cmd := &cobra.Command{
		Use:   "serve [--concurrency N]",
		Short: "Run a worker (and leader candidate) until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkServe(cfg, httpOpts); err != nil {
				return err
			}
			if err := checkHTTP(&httpOpts); err != nil {
				return err
			}
			c, err := a.serverClient(cmd.Context())
			if err != nil {
				return err
			}
			if err := requireWorker(cmd.Context(), c, "run a worker"); err != nil {
				c.Close()
				return err
			}
			// What the process opened is closed in reverse order once the worker has stopped,
			// within closeTimeout: a catalog or node that stopped answering must not hold the
			// process after the worker's own bounded shutdown.
			closers := []func(){c.Close}
			defer func() {
				if !closeWithin(closeTimeout, closers) {
					slog.Warn("connections did not close in time; exiting anyway")
				}
			}()
			// SIGTERM starts a graceful shutdown: no new claims, running tasks get ShutdownGrace,
			// recording their results ShutdownRecordTimeout. A second signal ends the process at
			// once: stop gives the signals back their default action.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, stop)
			// One catalog listener for the whole process: the worker, its cleaner and the API's
			// event streams subscribe to it. It outlives them all, as it stops last.
			cfg.Notifier = notifier.New(c.Catalog().Pool.Config().ConnConfig, slog.Default())
			nctx, stopNotifier := context.WithCancel(context.WithoutCancel(ctx))
			notifierDone := make(chan struct{})
			go func() { defer close(notifierDone); cfg.Notifier.Run(nctx) }()
			closers = append(closers, func() { stopNotifier(); <-notifierDone })
			stopHTTP, err := a.startHTTP(ctx, httpOpts, &cfg)
			if err != nil {
				return err
			}
			// The dashboard stays up while running tasks finish, and stops with the worker.
			closers = append(closers, stopHTTP)
			cfg.Features = features()
			w := engine.NewWorker(c.Catalog(), cfg)
			return classify(w.Run(ctx))
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Concurrency, "concurrency", 100, "tasks this worker runs at once")
	f.StringVar(&httpOpts.addr, "http", "", "serve the API, the dashboard and /metrics on this HOST:PORT, e.g. 127.0.0.1:8080; callers sign in as catalog roles")
	f.StringVar(&httpOpts.token, "http-token", "", "bearer token /metrics requires (env DECKHAND_HTTP_TOKEN); without it /metrics answers only this machine")
	f.DurationVar(&httpOpts.sessionIdle, "http-session-idle", 12*time.Hour, "a dashboard session unused this long ends")
	f.IntVar(&httpOpts.maxSessions, "http-max-sessions", 100, "most dashboard sessions signed in at once")
	f.StringVar(&cfg.Name, "name", "", "worker name shown in deckhand.workers (default host:pid)")
	f.DurationVar(&cfg.LeaseTTL, "lease", 15*time.Second, "a worker silent this long is declared dead and its tasks re-run")
	f.DurationVar(&cfg.PollInterval, "poll-interval", time.Second, "claim this often even without a notification")
	f.DurationVar(&cfg.MaintenanceInterval, "maintenance-interval", time.Second, "how often the leader looks for dead workers")
	f.DurationVar(&cfg.ProgressInterval, "progress-interval", time.Second, "how often to read the progress of running statements on the nodes (negative: never)")
	f.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 30*time.Second, "how long running tasks may finish after SIGTERM before they are cancelled")
	f.DurationVar(&cfg.ShutdownRecordTimeout, "shutdown-record-timeout", 5*time.Second, "after the grace, how long to try recording results before exiting (exit 1 if some are not: the leader re-runs them)")
	f.DurationVar(&cfg.Backoff.Base, "retry-backoff", engine.DefaultBackoff.Base, "backoff after the first retryable failure (doubles each attempt)")
	f.DurationVar(&cfg.Backoff.Max, "retry-backoff-max", engine.DefaultBackoff.Max, "longest backoff between attempts")
	cmd.PreRun = func(*cobra.Command, []string) { cfg.Backoff.Jitter = engine.DefaultBackoff.Jitter }
	return cmd
}

// closeTimeout bounds closing the process's connections once the worker has stopped.
const closeTimeout = 3 * time.Second

// closeWithin runs closers in reverse order and waits at most d for them, reporting whether
// they all returned.
func closeWithin(d time.Duration, closers []func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
