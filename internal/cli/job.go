package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

func (a *app) jobCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "Submit, watch and control jobs"}
	cmd.AddCommand(a.jobSubmit(), a.jobRun(), a.jobList(), a.jobShow(), a.jobCancel(), a.jobRetry(), a.jobPause(),
		a.jobResume(), a.jobWait())
	return cmd
}

func (a *app) jobSubmit() *cobra.Command {
	var key string
	var priority int
	cmd := &cobra.Command{
		Use:   "submit FILE|- [--key K] [--priority P]",
		Short: "Submit a job spec (JSON or YAML); prints the job id",
		Args:  exactArgs(1, "a spec FILE or - for standard input"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(a.stdin)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return Usage("read spec: %v", err)
			}
			job, err := spec.Parse(data)
			if err != nil {
				return Usage("%v", err)
			}
			if cmd.Flags().Changed("key") {
				job.Key = key
			}
			if cmd.Flags().Changed("priority") {
				job.Priority = priority
			}
			return a.submit(cmd.Context(), job)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", keyUsage+" (instead of the spec's key)")
	cmd.Flags().IntVar(&priority, "priority", 0, priorityUsage+" (instead of the spec's priority)")
	return cmd
}

const (
	keyUsage      = "refuse the job (exit 4, the unfinished job's id on stdout) while a job of yours with this key has not ended"
	priorityUsage = "claim order on shared nodes, -100 to 100, higher first; each point weighs as a minute of waiting"
)

// submit submits job and prints its id; a job refused for its key prints the id of the job
// that holds the key instead, and exits 4.
func (a *app) submit(ctx context.Context, job *spec.Job) error {
	if err := job.Validate(engine.SubmittableKinds(features()...)); err != nil {
		return Usage("%v", err)
	}
	c, err := a.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	id, err := c.Submit(ctx, job)
	if err != nil {
		a.printHolder(err)
		return classify(err)
	}
	return a.printSubmitted(id, "submit")
}

// printSubmitted prints the id of what a command made: alone on a line, so that a script can
// take it with `id=$(...)`, or with -o json as one object saying what was done.
func (a *app) printSubmitted(id int64, done string) error {
	if a.json() {
		return PrintJSON(a.stdout, map[string]any{"id": id, "done": done})
	}
	_, err := fmt.Fprintln(a.stdout, id)
	return err
}

// printHolder prints, for a refusal of a duplicate key, the id of the job that holds the key.
func (a *app) printHolder(err error) {
	var dup *engine.DuplicateKeyError
	if errors.As(err, &dup) && dup.JobID > 0 {
		fmt.Fprintln(a.stdout, dup.JobID)
	}
}

func (a *app) jobRun() *cobra.Command {
	var node, owner, key string
	var noTx bool
	var priority int
	cmd := &cobra.Command{
		Use:   "run --node N [--owner R] [--no-transaction] [--key K] [--priority P] SQL",
		Short: "Submit a one-task SQL job; prints the job id",
		Args:  exactArgs(1, "the SQL text"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if node == "" {
				return Usage("--node is required")
			}
			job := engine.RunSpec(node, owner, args[0], !noTx)
			job.Key, job.Priority = key, priority
			return a.submit(cmd.Context(), job)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", keyUsage)
	cmd.Flags().IntVar(&priority, "priority", 0, priorityUsage)
	cmd.Flags().StringVar(&node, "node", "", "node to run on")
	cmd.Flags().StringVar(&owner, "owner", "", "role to run as (default: you)")
	cmd.Flags().BoolVar(&noTx, "no-transaction", false, "run outside a transaction block (VACUUM, CREATE INDEX CONCURRENTLY)")
	return cmd
}

func (a *app) jobList() *cobra.Command {
	var f deckhandtype.JobFilter
	var state string
	cmd := listCommand(a, "list", "List jobs, newest first",
		func(c *engine.Client, ctx context.Context) ([]deckhandtype.Job, error) { return c.Jobs(ctx, f) },
		[]string{"id", "state", "tasks", "priority", "submitted_by", "created", "duration", "description"},
		eachRow(func(j deckhandtype.Job) []string {
			return []string{strconv.FormatInt(j.ID, 10), string(j.State), progressText(j), strconv.Itoa(j.Priority),
				j.SubmittedBy, j.CreatedAt.Local().Format(time.DateTime), durationText(j), j.Description}
		}))
	cmd.PreRunE = func(*cobra.Command, []string) error {
		f.State = deckhandtype.JobState(state)
		if err := checkFilter("job", f.State, deckhandtype.JobStates, f.Limit); err != nil {
			return err
		}
		if f.BeforeID < 0 {
			return Usage("--before must be a job id, got %d", f.BeforeID)
		}
		return nil
	}
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "most jobs to list")
	cmd.Flags().Int64Var(&f.BeforeID, "before", 0, "only jobs with an id below this (paging)")
	return cmd
}

func progressText(j deckhandtype.Job) string {
	s := fmt.Sprintf("%d/%d done", j.TasksDone, j.TasksTotal)
	if j.TasksFailed > 0 {
		s += fmt.Sprintf(", %d failed", j.TasksFailed)
	}
	if j.TasksCancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", j.TasksCancelled)
	}
	if j.TasksUnscheduled > 0 {
		s += fmt.Sprintf(", %d unscheduled", j.TasksUnscheduled)
	}
	return s
}

func durationText(j deckhandtype.Job) string {
	if j.FinishedAt == nil {
		return time.Since(j.CreatedAt).Round(time.Millisecond).String() + "…"
	}
	return j.FinishedAt.Sub(j.CreatedAt).Round(time.Millisecond).String()
}

func (a *app) jobShow() *cobra.Command {
	var page deckhandtype.TaskPage
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a job with its tasks and attempts, a page of tasks at a time",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := jobID(args[0])
			if err != nil {
				return err
			}
			if page.Limit < 0 || page.After < 0 {
				return Usage("--tasks-limit and --tasks-after take a number of tasks and a task id")
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			d, err := c.JobPage(cmd.Context(), id, page)
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, d)
			}
			fmt.Fprintf(a.stdout, "job %d  %s  %s  (%s)\n", d.ID, d.State, progressText(d.Job), durationText(d.Job))
			if d.Description != "" {
				fmt.Fprintf(a.stdout, "  %s\n", d.Description)
			}
			if d.Key != nil {
				fmt.Fprintf(a.stdout, "  key: %s\n", *d.Key)
			}
			if d.Priority != 0 {
				fmt.Fprintf(a.stdout, "  priority: %d\n", d.Priority)
			}
			if d.Schedule != nil {
				fmt.Fprintf(a.stdout, "  %s\n", scheduleText(d.Schedule))
			}
			fmt.Fprintln(a.stdout)
			rows := make([][]string, 0, len(d.Tasks))
			for _, t := range d.Tasks {
				node := "-"
				if t.Node != nil {
					node = *t.Node
				}
				state := string(t.State)
				if t.Progress != nil {
					state += ": " + t.Progress.String()
				}
				rows = append(rows, []string{t.Name, t.Kind, node, t.Owner, state,
					fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts), fmt.Sprint(t.DependsOn), t.LastError.String()})
			}
			if err := PrintTable(a.stdout, []string{"task", "kind", "node", "owner", "state", "attempts", "depends_on", "last_error"}, rows); err != nil {
				return err
			}
			if d.NextTasksAfter != nil {
				fmt.Fprintf(a.stdout, "(%d tasks shown of %d; the next ones: deckhand job show %d --tasks-after %d)\n",
					len(d.Tasks), d.TasksTotal, d.ID, *d.NextTasksAfter)
			}
			var failures [][]string
			for _, at := range d.Attempts {
				if at.Message != nil {
					failures = append(failures, []string{at.TaskName, strconv.Itoa(at.Attempt), string(at.Outcome),
						deref(at.SQLState), deref(at.Message)})
				}
			}
			if len(failures) > 0 {
				fmt.Fprintln(a.stdout)
				return PrintTable(a.stdout, []string{"task", "attempt", "outcome", "sqlstate", "error"}, failures)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&page.Limit, "tasks-limit", 1000, "most tasks to show, with their attempts (0: all)")
	cmd.Flags().Int64Var(&page.After, "tasks-after", 0, "only tasks with an id above this (the next page: next_tasks_after)")
	return cmd
}

// scheduleText says which schedule submitted a job, for which due time.
func scheduleText(s *deckhandtype.JobSchedule) string {
	name := fmt.Sprintf("%d (removed)", s.ID)
	if s.Name != nil {
		name = *s.Name
	}
	if s.DueAt == nil {
		return "submitted by schedule " + name
	}
	return fmt.Sprintf("submitted by schedule %s, due %s", name, s.DueAt.Format(time.RFC3339))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (a *app) jobCancel() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job: pending tasks at once, running ones on their node",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.control(cmd.Context(), args[0], "cancel")
		},
	}
}

func (a *app) jobRetry() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Re-run the failed and cancelled tasks of a job",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.control(cmd.Context(), args[0], "retry")
		},
	}
}

func (a *app) jobPause() *cobra.Command {
	var now bool
	cmd := &cobra.Command{
		Use:   "pause ID [--now]",
		Short: "Pause a job: none of its tasks starts until it is resumed; running ones finish (or stop, with --now)",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if now {
				return a.control(cmd.Context(), args[0], "pause now")
			}
			return a.control(cmd.Context(), args[0], "pause")
		},
	}
	cmd.Flags().BoolVar(&now, "now", false, "also cancel the running tasks on their nodes and release them, without charging an attempt")
	return cmd
}

func (a *app) jobResume() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused job",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.control(cmd.Context(), args[0], "resume")
		},
	}
}

func (a *app) control(ctx context.Context, arg, action string) error {
	id, err := jobID(arg)
	if err != nil {
		return err
	}
	c, err := a.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var state deckhandtype.JobState
	switch action {
	case "cancel":
		state, err = c.Cancel(ctx, id)
	case "pause", "pause now":
		state, err = c.Pause(ctx, id, action == "pause now")
	case "resume":
		state, err = c.Resume(ctx, id)
	default:
		state, err = c.Retry(ctx, id)
	}
	if err != nil {
		a.printHolder(err)
		return classify(err)
	}
	if a.json() {
		return PrintJSON(a.stdout, map[string]any{"id": id, "state": state})
	}
	fmt.Fprintf(a.stdout, "job %d %s\n", id, state)
	return nil
}
