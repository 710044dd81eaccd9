package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/internal/demo"
)

func (a *app) demoCommand() *cobra.Command {
	var opts demo.Options
	var nodes string
	cmd := &cobra.Command{
		Use:   "demo [--nodes eu,us] [--owner app] [--rows N]",
		Short: "Run a sample job end to end on this machine",
		Long: `Run a sample job end to end: a DAG of SQL tasks fanning out over two nodes and back in,
run by two workers inside this process, with live progress, a per-task summary and a check of
the result on the nodes.

Without a catalog (no --catalog, no DECKHAND_CATALOG) it needs nothing but the PostgreSQL server
binaries (found with pg_config, in /usr/lib/postgresql/*/bin, or in $DECKHAND_PG_BIN): it starts a
throwaway cluster on 127.0.0.1, creates the catalog database deckhand, one database per node
(shop_eu, shop_us, registered as nodes eu and us) and the LOGIN role app that owns them and runs
the tasks. The cluster is stopped and its directory removed when the demo ends, also on Ctrl-C
(press it twice to quit at once).

With a catalog, no cluster is started: the nodes named by --nodes must be registered already
(deckhand init; deckhand node add eu --dsn ...), the role named by --owner must exist on them
and be allowed to create a schema in their database, and its password, if it needs one, must
come from the environment (PGPASSWORD, ~/.pgpass). The demo's tables live in schema
deckhand_demo on each node, dropped and recreated on every run. While the demo runs, its two
workers serve the whole catalog, as 'deckhand serve' would.

Exit status: 0 when the job finished and its result checked out, 1 when it failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.CatalogDSN = a.catalogDSN
			opts.Nodes = nil
			for _, n := range strings.Split(nodes, ",") {
				if n = strings.TrimSpace(n); n != "" {
					opts.Nodes = append(opts.Nodes, n)
				}
			}
			if len(opts.Nodes) == 0 {
				return Usage("--nodes: name at least one node")
			}
			if opts.Rows < 1 {
				return Usage("--rows must be at least 1, got %d", opts.Rows)
			}
			if err := opts.Validate(); err != nil {
				return Usage("%v", err)
			}
			// The first Ctrl-C stops the demo cleanly; after it the default handler is back,
			// so a second one quits at once (the servers die with us, see pgcluster).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, stop)

			p := NewProgress(a.rawStdout)
			opts.Status, opts.Bar = p, Bar
			opts.Logger = slog.Default()
			if f := cmd.Flag("log-level"); f == nil || !f.Changed {
				// Worker chatter (leadership, debug) would only clutter the demo's own output.
				opts.Logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			err := demo.Run(ctx, opts, a.stdout)
			if errors.Is(err, demo.ErrJobFailed) || errors.Is(err, demo.ErrInterrupted) {
				return Failed("%w", err)
			}
			return classify(err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodes, "nodes", strings.Join(demo.DefaultNodes, ","), "comma-separated nodes to run on; the report runs on the first")
	f.StringVar(&opts.Owner, "owner", demo.DefaultOwner, "role the tasks run as")
	f.IntVar(&opts.Rows, "rows", demo.DefaultRows, "orders loaded per node (customers: a tenth of it)")
	return cmd
}
