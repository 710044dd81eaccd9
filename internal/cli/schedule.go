package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/schedule"
	"github.com/deckhandhq/deckhand/spec"
)

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Submit a job spec on a timetable (cron or interval)"}
	cmd.AddCommand(a.scheduleAdd(), a.scheduleList(), a.scheduleShow(),
		a.scheduleControl("pause", "Stop a schedule from firing until it is resumed"),
		a.scheduleControl("resume", "Let a paused schedule fire again, from its next due time after now"),
		a.scheduleControl("remove", "Delete a schedule and its firings (its jobs stay)"))
	return cmd
}

func (a *app) scheduleAdd() *cobra.Command {
	var r schedule.Request
	var every string
	cmd := &cobra.Command{
		Use:   "add NAME (--cron 'EXPR' [--timezone TZ] | --every DURATION) [--skip-missed] [--no-overlap] FILE|-",
		Short: "Add a schedule that submits a job spec (JSON or YAML) at each due time; prints its id",
		Args:  exactArgs(2, "a schedule NAME and a spec FILE or - for standard input"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Name = args[0]
			if every != "" {
				d, err := time.ParseDuration(every)
				if err != nil {
					return Usage("--every %q: want a duration such as 30s, 5m or 1h", every)
				}
				if d < schedule.MinEvery {
					return Usage("--every %s: the shortest interval is %s", every, schedule.MinEvery)
				}
				r.Every = d
			}
			if _, err := schedule.ParseTiming(r.Cron, r.Timezone, r.Every); err != nil {
				return Usage("%v", err)
			}
			data, err := a.readSpec(args[1])
			if err != nil {
				return err
			}
			if r.Job, err = spec.Parse(data); err != nil {
				return Usage("%v", err)
			}
			if err := r.Job.Validate(engine.SubmittableKinds(features()...)); err != nil {
				return Usage("%v", err)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			id, next, err := schedule.Add(cmd.Context(), c, r)
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, map[string]any{"id": id, "name": r.Name, "next_run_at": next})
			}
			fmt.Fprintln(a.stdout, id)
			fmt.Fprintf(a.stderr, "schedule %s: next run %s\n", r.Name, next.Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Cron, "cron", "", "cron expression: minute hour day-of-month month day-of-week, or @hourly, @daily, ...")
	f.StringVar(&r.Timezone, "timezone", "", "time zone of the cron expression, an IANA name (default UTC)")
	f.StringVar(&every, "every", "", "interval between due times instead of --cron, e.g. 30s, 5m, 1h (at least 1s)")
	f.BoolVar(&r.SkipMissed, "skip-missed", false, "due times that passed while no worker ran do not fire (default: they fire once)")
	f.BoolVar(&r.NoOverlap, "no-overlap", false, "skip a due time while the schedule's previous job has not ended")
	return cmd
}

// readSpec reads a job spec from a file or, for -, standard input.
func (a *app) readSpec(arg string) ([]byte, error) {
	var data []byte
	var err error
	if arg == "-" {
		data, err = io.ReadAll(a.stdin)
	} else {
		data, err = os.ReadFile(arg)
	}
	if err != nil {
		return nil, Usage("read spec: %v", err)
	}
	return data, nil
}

func (a *app) scheduleList() *cobra.Command {
	return listCommand(a, "list", "List schedules with their next run and last job",
		func(c *engine.Client, ctx context.Context) ([]deckhandtype.Schedule, error) {
			return c.Catalog().Schedules(ctx)
		},
		[]string{"name", "timing", "submitter", "state", "next_run", "last_job", "last_outcome", "spec"},
		eachRow(func(s deckhandtype.Schedule) []string {
			return []string{s.Name, timingText(s) + flagsText(s), s.SubmittedBy, pausedText(s), timeText(s.NextRunAt),
				lastJobText(s), lastOutcomeText(s), s.SpecSummary}
		}))
}

func (a *app) scheduleShow() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "show NAME|SUBMITTER/NAME",
		Short: "Show a schedule (your own by NAME, another role's as SUBMITTER/NAME), its job spec (a summary; in full with -o json) and its latest firings",
		Args:  exactArgs(1, "a schedule NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return Usage("--runs must be at least 1, got %d", limit)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Catalog().Schedule(cmd.Context(), args[0])
			if err != nil {
				return classify(err)
			}
			runs, err := c.Catalog().ScheduleRuns(cmd.Context(), args[0], limit)
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, struct {
					deckhandtype.Schedule
					Runs []deckhandtype.ScheduleRun `json:"runs"`
				}{s, runs})
			}
			fmt.Fprintf(a.stdout, "schedule %s  %s%s  %s\n", s.Name, timingText(s), flagsText(s), pausedText(s))
			fmt.Fprintf(a.stdout, "  submitter %s, runs as %s\n", s.SubmittedBy, strings.Join(s.Owners, ", "))
			fmt.Fprintf(a.stdout, "  spec: %s\n", s.SpecSummary)
			fmt.Fprintf(a.stdout, "  next run: %s\n", timeText(s.NextRunAt))
			if s.LastError != nil {
				fmt.Fprintf(a.stdout, "  last error: %s\n", *s.LastError)
			}
			fmt.Fprintln(a.stdout)
			rows := make([][]string, 0, len(runs))
			for _, r := range runs {
				job, state := "-", "-"
				if r.JobID != nil {
					job = fmt.Sprint(*r.JobID)
				}
				if r.JobState != nil {
					state = string(*r.JobState)
				}
				missed := ""
				if r.Missed > 0 {
					missed = fmt.Sprint(r.Missed)
				}
				rows = append(rows, []string{r.DueAt.Format(time.RFC3339), string(r.Outcome), missed, job, state, deref(r.Error)})
			}
			return PrintTable(a.stdout, []string{"due", "outcome", "missed", "job", "job_state", "error"}, rows)
		},
	}
	cmd.Flags().IntVar(&limit, "runs", 20, "how many of the latest firings to show")
	return cmd
}

func (a *app) scheduleControl(verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME|SUBMITTER/NAME",
		Short: short,
		Args:  exactArgs(1, "a schedule NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, name := cmd.Context(), args[0]
			var next time.Time
			switch verb {
			case "pause":
				err = c.Catalog().PauseSchedule(ctx, name)
			case "resume":
				next, err = schedule.Resume(ctx, c, name)
			case "remove":
				err = c.Catalog().RemoveSchedule(ctx, name)
			}
			if err != nil {
				return classify(err)
			}
			if a.json() {
				out := map[string]any{"name": name, "done": verb}
				if !next.IsZero() {
					out["next_run_at"] = next
				}
				return PrintJSON(a.stdout, out)
			}
			msg := fmt.Sprintf("schedule %s: %s", name, map[string]string{"pause": "paused", "resume": "resumed", "remove": "removed"}[verb])
			if !next.IsZero() {
				msg += ", next run " + next.Format(time.RFC3339)
			}
			fmt.Fprintln(a.stdout, msg)
			return nil
		},
	}
}

// timingText is the schedule's timing with an interval written as Go writes durations (5m0s).
func timingText(s deckhandtype.Schedule) string {
	if d := s.Every(); d > 0 {
		return "every " + d.String()
	}
	return s.Timing
}

func flagsText(s deckhandtype.Schedule) string {
	var f []string
	if s.SkipMissed {
		f = append(f, "skip-missed")
	}
	if s.NoOverlap {
		f = append(f, "no-overlap")
	}
	if len(f) == 0 {
		return ""
	}
	return " (" + strings.Join(f, ", ") + ")"
}

func pausedText(s deckhandtype.Schedule) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func lastJobText(s deckhandtype.Schedule) string {
	if s.LastJobID == nil {
		return "-"
	}
	if s.LastJobState == nil {
		return fmt.Sprintf("%d (deleted)", *s.LastJobID)
	}
	return fmt.Sprintf("%d %s", *s.LastJobID, *s.LastJobState)
}

func lastOutcomeText(s deckhandtype.Schedule) string {
	if s.LastOutcome == nil {
		return "-"
	}
	return string(*s.LastOutcome)
}
