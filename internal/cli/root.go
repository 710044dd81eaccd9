// Package cli implements the deckhand command line: thin commands over engine and catalog.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
)

// app holds what every command shares: global flags and the output streams.
type app struct {
	catalogDSN string
	output     string
	logLevel   string
	stdin      io.Reader
	stdout     io.Writer // every text the CLI prints goes through a safeWriter (safe.go)
	stderr     io.Writer
	// The streams as given, for the progress line, which draws with escape sequences of its
	// own and escapes what it shows itself.
	rawStdout, rawStderr io.Writer
	// The catalog handle the command opened last, if any: Main asks it whether an error
	// came from a catalog that stopped answering.
	cat *catalog.Catalog
}

// Main runs the command line with args and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	rawStdout, rawStderr := stdout, stderr
	stdout, stderr = newSafeWriter(stdout), newSafeWriter(stderr)
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, rawStdout: rawStdout, rawStderr: rawStderr}
	root := a.rootCommand()
	root.SetArgs(args)
	err := catalog.ExplainReadOnly(root.ExecuteContext(ctx))
	if err != nil && a.cat != nil && ctx.Err() == nil {
		if e := a.cat.NoAnswer(err); e != err {
			err = &ExitError{Code: ExitFailed, Err: e}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "deckhand: "+errorLine(err))
	}
	return ExitCode(err)
}

// errorLine is err on one line, each of its lines once, and a failed connection's reason
// once (taskerr.ConnectMessage).
func errorLine(err error) string {
	var lines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(taskerr.ConnectMessage(err), "\n") {
		l = spec.OneLine(l)
		if l != "" && !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "deckhand",
		Short: "Durable background jobs for PostgreSQL fleets",
		Long: `deckhand runs long-running management operations on PostgreSQL fleets in the background:
jobs made of dependent tasks, executed by any number of workers, surviving crashes and restarts.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := ParseFormat(a.output); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
				return Usage("--log-level %q: want debug, info, warn or error", a.logLevel)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level})))
			return nil
		},
	}
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.StringVar(&a.catalogDSN, "catalog", os.Getenv("DECKHAND_CATALOG"), "catalog database conninfo (env DECKHAND_CATALOG)")
	// The environment's conninfo may hold a password: help shows no default rather than it.
	pf.Lookup("catalog").DefValue = ""
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(a.initCommand(), a.nodeCommand(), a.jobCommand(), a.serveCommand(),
		a.demoCommand(), a.benchCommand())
	root.AddCommand(a.exportCommand())
	root.AddCommand(a.cleanupCommand(), a.dropCommand(), a.settingCommand())
	root.AddCommand(a.placementsCommand(), a.moveCommand(), a.rebalanceCommand())
	root.AddCommand(a.scheduleCommand())
	// Before the built-in commands, which take their output stream when they are made.
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	builtinCommands(root)
	groupCommands(root)
	return root
}

// groupCommands makes every command that only groups subcommands (deckhand, deckhand job,
// ...) print its help when called alone and refuse an unknown subcommand with a usage error.
// Left to cobra, `deckhand bogus` exits 1 and `deckhand job lst` prints help and exits 0,
// which a script would take for success.
func groupCommands(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if cmd.SuggestionsMinimumDistance <= 0 {
				cmd.SuggestionsMinimumDistance = 2
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				best := s[0]
				for _, name := range s { // "nod" means node more likely than job
					if strings.HasPrefix(name, strings.ToLower(args[0])) {
						best = name
						break
					}
				}
				msg += fmt.Sprintf(" (did you mean %q?)", best)
			}
			return Usage("%s; see `%s --help`", msg, cmd.CommandPath())
		}
	}
	if cmd.Runnable() && cmd.Args != nil {
		// cobra's own argument checks (cobra.NoArgs, ...) return plain errors, which would
		// exit 1 as if the operation had failed: a stray argument is bad usage (exit 2).
		check := cmd.Args
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			if err != nil {
				if _, ok := errors.AsType[*ExitError](err); !ok {
					return Usage("%v; see `%s --help`", err, cmd.CommandPath())
				}
			}
			return err
		}
	}
	for _, sub := range cmd.Commands() {
		groupCommands(sub)
	}
}

func (a *app) json() bool { return strings.EqualFold(a.output, string(FormatJSON)) }

// client opens the catalog for a command, mapping a missing catalog to a usage error. Each
// round trip to the catalog is bounded (catalog.Options.BoundRoundTrips): a command's
// statements are all short, and one that waits (job wait, drop --wait, cleanup run --wait)
// does so in many round trips, so a catalog that stops answering ends the command.
func (a *app) client(ctx context.Context) (*engine.Client, error) {
	return a.open(ctx, catalog.Options{BoundRoundTrips: true})
}

// serverClient opens the catalog for serve, whose worker and API bound their calls
// themselves, some of which may take longer than a command's.
func (a *app) serverClient(ctx context.Context) (*engine.Client, error) {
	return a.open(ctx, catalog.Options{})
}

func (a *app) open(ctx context.Context, o catalog.Options) (*engine.Client, error) {
	if a.catalogDSN == "" {
		return nil, Usage("no catalog configured: pass --catalog or set DECKHAND_CATALOG")
	}
	cat, err := catalog.OpenWith(ctx, a.catalogDSN, o)
	var c *engine.Client
	if err == nil {
		a.cat = cat
		c, err = engine.NewClient(ctx, cat, features()...)
	}
	if errors.Is(err, catalog.ErrBadDSN) || errors.Is(err, catalog.ErrForbidden) {
		// A login without a deckhand role is refused as a missing grant is elsewhere: exit 2.
		return nil, Usage("%v", err)
	}
	if err != nil {
		return nil, Failed("%w", err)
	}
	return c, nil
}

// requireWorker refuses, in one line naming the grant, a catalog login that may not do what a
// worker does (serve, cleanup run): PostgreSQL would only say "permission denied for table".
func requireWorker(ctx context.Context, c *engine.Client, what string) error {
	role, ok, err := c.Catalog().MayWork(ctx)
	if err != nil {
		return Failed("%w", err)
	}
	if !ok {
		return Usage("%s may not %s: that takes the deckhand_worker role (GRANT deckhand_worker TO %s); see docs/security.md",
			role, what, pgx.Identifier{role}.Sanitize())
	}
	return nil
}

// classify maps engine and catalog errors to exit codes: bad input, unknown objects and
// requests that the object's state refuses (cancelling a job that has ended, resuming one that
// is not paused, as retrying a cleanup record that has not failed) are usage errors (2): the
// request as given cannot be done, and trying it again changes nothing. Everything else failed
// (1): something was tried and did not work (a catalog or node that did not answer, ...).
func classify(err error) error {
	var exit *ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return err
	case engine.IsInvalid(err), errors.Is(err, catalog.ErrNotFound), errors.Is(err, catalog.ErrJobTerminal):
		return &ExitError{Code: ExitUsage, Err: err}
	case errors.Is(err, catalog.ErrDuplicateKey):
		return &ExitError{Code: ExitDuplicate, Err: err}
	default:
		return &ExitError{Code: ExitFailed, Err: err}
	}
}

func (a *app) initCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create or upgrade the catalog schema (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.catalogDSN == "" {
				return Usage("no catalog configured: pass --catalog or set DECKHAND_CATALOG")
			}
			cat, err := catalog.Open(cmd.Context(), a.catalogDSN)
			if errors.Is(err, catalog.ErrBadDSN) {
				return Usage("%v", err)
			}
			if err != nil {
				return Failed("%w", err)
			}
			defer cat.Close()
			applied, err := cat.Migrate(cmd.Context())
			if needsCreateRole(err) {
				return Failed("%w: the first init creates deckhand's roles (deckhand_submitter, deckhand_admin, deckhand_worker), "+
					"once per cluster: run it as a role with CREATEROLE, or have one create them first (see docs/security.md)", err)
			}
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42501" {
				// A login that may not create the catalog's schema (a submitter given a new
				// database's conninfo): PostgreSQL only says which privilege it lacks. A login
				// that does not own an existing catalog is told whose it is by Migrate itself.
				return Failed("%w: a new catalog's init runs as a login that may create schemas in the database, "+
					"or in a schema made for it (CREATE SCHEMA deckhand AUTHORIZATION that_login)", err)
			}
			if err != nil {
				return Failed("%w", err)
			}
			if applied == nil {
				applied = []int{} // "applied": [] rather than null
			}
			if a.json() {
				return PrintJSON(a.stdout, map[string]any{"schema_version": catalog.SchemaVersion(), "applied": applied})
			}
			if len(applied) == 0 {
				fmt.Fprintf(a.stdout, "catalog is up to date (schema version %d)\n", catalog.SchemaVersion())
			} else {
				fmt.Fprintf(a.stdout, "catalog upgraded to schema version %d (applied %v)\n", catalog.SchemaVersion(), applied)
			}
			return nil
		},
	}
}

// needsCreateRole reports whether a migration failed because the login may not create roles.
func needsCreateRole(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && strings.Contains(pgErr.Message, "create role")
}
