package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

func (a *app) dropCommand() *cobra.Command {
	var (
		node, owner         string
		lockTimeout, maxRun time.Duration
		attempts            int
		wait                bool
	)
	cmd := &cobra.Command{
		Use:   "drop --node N [--owner R] TABLE...",
		Short: "Drop tables as soon as no query uses them, never making writers queue; prints the job id",
		Long: `Submit a job that drops the tables (schema.table, or table on the submitter's search_path)
as soon as no query uses them. Each drop asks for its lock with a short lock_timeout, so that
queries arriving meanwhile queue behind it for at most that long; while a query holds a table,
the drop steps back and tries again the moment pg_locks shows the table free. Nothing is
dropped with CASCADE, pinned tables are refused, and the drop runs connected as the owner
role: a table it may not drop fails the job at once with PostgreSQL's reason.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return Usage("expected at least one TABLE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if node == "" {
				return Usage("--node is required")
			}
			if lockTimeout < 0 || maxRun < 0 {
				return Usage("--lock-timeout and --timeout must not be negative")
			}
			for _, t := range args {
				if _, err := nodeconn.ParseQualifiedName(t); err != nil {
					return Usage("%v", err)
				}
			}
			payload, err := json.Marshal(drop.Payload{Tables: args, LockTimeout: spec.Duration(lockTimeout)})
			if err != nil {
				return err
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := c.Submit(cmd.Context(), &spec.Job{
				Description: "drop " + strings.Join(args, ", ") + " on " + node,
				Kind:        drop.KindDrop,
				Tasks: []spec.Task{{Name: "drop", Kind: drop.KindDrop, Node: node, Owner: owner,
					Payload: payload, MaxAttempts: attempts, Timeout: spec.Duration(maxRun)}},
			})
			if err != nil {
				return classify(err)
			}
			if err := a.printSubmitted(id, "submit"); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			job, err := c.Wait(cmd.Context(), id, nil)
			if errors.Is(err, context.Canceled) {
				return Timeout("stopped waiting for job %d", id)
			}
			if errors.Is(err, catalog.ErrNoAnswer) {
				return stillRunning(err, id)
			}
			if err != nil {
				return classify(err)
			}
			if job.State != "finished" {
				d, err := c.Job(cmd.Context(), id)
				if err == nil && len(d.Tasks) > 0 && d.Tasks[0].LastError != nil {
					return Failed("job %d %s: %s", id, job.State, d.Tasks[0].LastError.String())
				}
				return Failed("job %d %s", id, job.State)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", "", "node the tables are on")
	f.StringVar(&owner, "owner", "", "role to drop as (default: you)")
	f.DurationVar(&lockTimeout, "lock-timeout", 0, "longest a drop may make others queue behind its lock (default: the cleanup_lock_timeout setting, 100ms)")
	f.DurationVar(&maxRun, "timeout", 24*time.Hour, "how long the drop may wait for queries to release the tables")
	f.IntVar(&attempts, "max-attempts", 0, "attempts on transient errors (default 3)")
	f.BoolVar(&wait, "wait", false, "wait for the job to end: exit 0 dropped, 1 failed (with the reason)")
	return cmd
}
