package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/bench"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

func (a *app) cleanupCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "cleanup", Short: "List and run the cleanup of resources left by operations"}
	cmd.AddCommand(a.cleanupList(), a.cleanupRun(), a.cleanupRetry(), a.cleanupForget(),
		a.cleanupPin(), a.cleanupUnpin(), a.cleanupPins())
	return cmd
}

func (a *app) cleanupList() *cobra.Command {
	var f deckhandtype.CleanupFilter
	var state string
	cmd := listCommand(a, "list [--state S] [--job ID]", "List cleanup records, newest first",
		func(c *engine.Client, ctx context.Context) ([]deckhandtype.CleanupRecord, error) {
			return c.CleanupRecords(ctx, f)
		},
		[]string{"id", "job", "operation", "type", "resource", "policy", "state", "attempts", "last_error"},
		eachRow(func(r deckhandtype.CleanupRecord) []string {
			return []string{strconv.FormatInt(r.ID, 10), strconv.FormatInt(r.JobID, 10),
				strconv.FormatInt(r.OperationID, 10), string(r.Type), resourceText(r.Resource()), string(r.Policy), string(r.State),
				strconv.Itoa(r.Attempts), deref(r.LastError)}
		}))
	cmd.Long = `List cleanup records, newest first. States:
  pending       its operation still runs; nothing touches it
  due           its operation ended and its policy says remove; the cleaner is on it
  in_use        a query or a walsender holds it; removed as soon as it is free
  retrying      the last attempt met a transient error; retried after a backoff
  pinned        a pin keeps it; removed once unpinned
  removed       gone (or was already gone)
  forgotten     kept by its policy (or by an operator); never removed
  failed        a permanent error, or too many transient ones: fix the cause, then
                'deckhand cleanup retry ID', or 'deckhand cleanup forget ID'
  node_removed  its node is no longer registered: re-add the node and retry, or forget it`
	cmd.PreRunE = func(*cobra.Command, []string) error {
		f.State = deckhandtype.CleanupState(state)
		if f.JobID < 0 { // would list nothing, as if the job had no records
			return Usage("--job must be a job id, got %d", f.JobID)
		}
		return checkFilter("cleanup", f.State, deckhandtype.CleanupStates, f.Limit)
	}
	cmd.Flags().StringVar(&state, "state", "", "only records in this state")
	cmd.Flags().Int64Var(&f.JobID, "job", 0, "only records of this job")
	cmd.Flags().IntVar(&f.Limit, "limit", 500, "most records to list")
	return cmd
}

// resourceText shows where a resource is: node:schema.name, or the bucket and key.
func resourceText(r deckhandtype.CleanupResource) string {
	r2 := r
	r2.Node = ""
	if r.Node == "" {
		return r2.Display()
	}
	return r.Node + ":" + r2.Display()
}

func (a *app) cleanupRun() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "run [--wait D]",
		Short: "Run one cleaner pass now, in this process, and print what it did",
		Long: `Run one cleaner pass now, in this process (no worker or leader needed): decide operations
whose job ended or whose worker died, then try every due record at once, in dependency order,
as the owner of the operation that registered it. Resources found in use are retried as soon as
they are free, for up to --wait. Exits 1 if a record failed for good during the pass.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return Usage("--wait must not be negative, got %s", wait)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := requireWorker(cmd.Context(), c, "run the cleaner"); err != nil {
				return err
			}
			pools := nodeconn.NewPools(4)
			defer pools.Close()
			cl := cleanup.New(c.Catalog(), pools)
			rep, err := cl.RunOnce(cmd.Context(), cleanup.RunOptions{Wait: wait, Now: true})
			if err := c.Catalog().NoAnswer(err); errors.Is(err, catalog.ErrNoAnswer) {
				// What the pass removed and could not record is found gone by the next one.
				return Failed("cleanup run: %v; the records it had not finished stay due for the next pass: see `deckhand cleanup list`", err)
			}
			if err != nil {
				return Failed("cleanup run: %w", err)
			}
			if a.json() {
				if err := PrintJSON(a.stdout, rep); err != nil {
					return err
				}
			} else {
				for _, d := range rep.Decided {
					fmt.Fprintf(a.stdout, "operation %d (job %d) %s: %s\n", d.ID, d.JobID, d.State, d.Reason)
				}
				for _, act := range rep.Actions {
					fmt.Fprintln(a.stdout, act.String())
				}
				fmt.Fprintln(a.stdout, rep.Summary())
			}
			if n := rep.Count(deckhandtype.CleanupFailed); n > 0 {
				return Failed("%d cleanup record(s) failed; see `deckhand cleanup list --state failed`", n)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "keep retrying resources in use, as soon as they are free, for up to this long")
	return cmd
}

func recordID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, Usage("cleanup record id must be a positive integer, got %q", s)
	}
	return id, nil
}

func (a *app) cleanupRetry() *cobra.Command {
	return a.recordCommand("retry ID", "Make a failed or node_removed record due again (after fixing its cause)",
		(*catalog.Catalog).RetryCleanupRecord, "cleanup record %d is due again")
}

func (a *app) cleanupForget() *cobra.Command {
	return a.recordCommand("forget ID", "Give up on a record: the resource, if it still exists, is left alone",
		(*catalog.Catalog).ForgetCleanupRecord, "cleanup record %d forgotten")
}

// recordCommand is a command that applies action to one cleanup record and reports done (a
// format of the record's id); with -o json {"id": ID, "done": VERB}, VERB the use's first word.
func (a *app) recordCommand(use, short string, action func(*catalog.Catalog, context.Context, int64) error, done string) *cobra.Command {
	verb, _, _ := strings.Cut(use, " ")
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "a cleanup record ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := recordID(args[0])
			if err != nil {
				return err
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := action(c.Catalog(), cmd.Context(), id); err != nil {
				return classify(err)
			}
			return a.done(map[string]any{"id": id, "done": verb}, fmt.Sprintf(done, id))
		},
	}
}

func (a *app) cleanupPin() *cobra.Command {
	var node, typeName, bucket, reason string
	cmd := &cobra.Command{
		Use:   "pin --node N [--type table] NAME | pin --bucket URL --type object|prefix KEY",
		Short: "Keep a resource alive: the cleaner and `deckhand drop` refuse it until unpinned",
		Args:  exactArgs(1, "the resource's NAME (schema.table for tables and indexes)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ := deckhandtype.ResourceType(typeName)
			if !slices.Contains(deckhandtype.ResourceTypes, typ) {
				return Usage("--type: unknown resource type %q (want one of %v)", typ, deckhandtype.ResourceTypes)
			}
			var r deckhandtype.CleanupResource
			switch typ {
			case deckhandtype.ResourceObject, deckhandtype.ResourcePrefix:
				if bucket == "" || node != "" {
					return Usage("--type %s needs --bucket and no --node", typ)
				}
				r = deckhandtype.CleanupResource{Type: typ, Location: bucket, Name: args[0]}
			default:
				if node == "" {
					return Usage("--node is required for --type %s", typ)
				}
				id, err := nodeconn.ParseQualifiedName(args[0])
				if err != nil {
					return Usage("%v", err)
				}
				if (typ == deckhandtype.ResourceTable || typ == deckhandtype.ResourceIndex) != (len(id) == 2) {
					if len(id) == 1 {
						return Usage("--type %s needs schema.name, got %q", typ, args[0])
					}
					return Usage("--type %s takes a bare name, got %q", typ, args[0])
				}
				r = deckhandtype.CleanupResource{Type: typ, Node: node, Name: id[len(id)-1]}
				if len(id) == 2 {
					r.Location = id[0]
				}
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if r.Node != "" {
				// A pin on a misspelt node holds nothing back, while the pin's author believes the
				// resource is safe (a legal hold): refuse it as any other command refuses a node.
				nodes, err := c.Catalog().NodesByName(cmd.Context(), []string{r.Node})
				if err != nil {
					return classify(err)
				}
				if _, ok := nodes[r.Node]; !ok {
					return Usage("unknown node %q (see `deckhand node list`)", r.Node)
				}
			}
			id, err := cleanup.New(c.Catalog(), nil).Pin(cmd.Context(), r, reason)
			if err != nil {
				return classify(err)
			}
			return a.printSubmitted(id, "pin")
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "node of the resource")
	cmd.Flags().StringVar(&typeName, "type", string(deckhandtype.ResourceTable), fmt.Sprintf("resource type: %v", deckhandtype.ResourceTypes))
	cmd.Flags().StringVar(&bucket, "bucket", "", "bucket URL, for objects and prefixes")
	cmd.Flags().StringVar(&reason, "reason", "", "why it is pinned (shown to whoever it stops)")
	return cmd
}

func (a *app) cleanupUnpin() *cobra.Command {
	return &cobra.Command{
		Use:   "unpin PIN_ID",
		Short: "Remove a pin; what it held back is cleaned up at once",
		Args:  exactArgs(1, "a pin ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return Usage("pin id must be a positive integer, got %q", args[0])
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.Unpin(cmd.Context(), id); err != nil {
				return classify(err)
			}
			return a.done(map[string]any{"id": id, "done": "unpin"}, fmt.Sprintf("pin %d removed", id))
		},
	}
}

func (a *app) cleanupPins() *cobra.Command {
	return listCommand(a, "pins", "List pins, newest first", (*engine.Client).Pins,
		[]string{"id", "type", "resource", "held_by", "in_force", "reason"}, eachRow(func(p deckhandtype.Pin) []string {
			holder := "manual"
			if p.OperationID != nil {
				holder = "operation " + strconv.FormatInt(*p.OperationID, 10)
			}
			r := deckhandtype.CleanupResource{Type: p.Type, Location: p.Location, Name: p.Name}
			if p.Node != nil {
				r.Node = *p.Node
			}
			return []string{strconv.FormatInt(p.ID, 10), string(p.Type), resourceText(r), holder,
				strconv.FormatBool(p.InForce), p.Reason}
		}))
}

func (a *app) benchCleanupCommand() *cobra.Command {
	o := bench.CleanupOptions{}
	cmd := &cobra.Command{
		Use:   "cleanup [--rounds N] [--hold D]",
		Short: "Measure deferred drops: delay after the last conflicting query, and waits of concurrent statements",
		Long: `bench cleanup measures, with default settings, on DECKHAND_CATALOG's server (in scratch
databases it drops afterwards) or on a throwaway cluster it starts itself:
  - the time from the end of the last query using a table to the table being dropped, through
    'deckhand drop' and through the cleaner on the leader (a deferred_on_success record);
  - the longest statement of a concurrent writer (into another table) and of a reader of the
    table while the drop was pending, against the lock timeout.
The last line is key=value pairs; -o json prints the same figures as one JSON object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := firstError(atLeast1("--rounds", o.Rounds), positive("--hold", o.Hold)); err != nil {
				return err
			}
			o.CatalogDSN = a.catalogDSN
			res, err := bench.RunCleanup(cmd.Context(), o, a.progress())
			if err != nil {
				return Failed("bench cleanup: %w", err)
			}
			return a.printSummary(res.Summary())
		},
	}
	cmd.Flags().IntVar(&o.Rounds, "rounds", 5, "drops measured on each path")
	cmd.Flags().DurationVar(&o.Hold, "hold", 2*time.Second, "how long the conflicting SELECT holds each table")
	return cmd
}
