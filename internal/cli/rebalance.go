package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/rebalance"
)

// RebalanceKey is the job key of rebalances: a submitter's second rebalance is refused while
// the first has not ended.
const RebalanceKey = "deckhand.rebalance"

type rebalanceFlags struct {
	groups    []string
	schemas   string
	threshold string
	owner     string
	dryRun    bool
}

// rebalancePlan is what a rebalance prints: the plan and the graph of its moves.
type rebalancePlan struct {
	rebalance.Plan
	Steps   []rebalance.Step `json:"steps"`
	Skipped []string         `json:"skipped"`
	JobID   *int64           `json:"job_id"` // nil: a dry run, or nothing to move
	// candidates and owner say, in the listing, why a plan has nothing to balance.
	candidates int
	owner      string
	pattern    string
}

func (a *app) rebalanceCommand() *cobra.Command {
	var f rebalanceFlags
	cmd := &cobra.Command{
		Use:   "rebalance --groups G1,G2,... [--schemas PATTERN] [--threshold 10%] [--owner R] [--dry-run]",
		Short: "Move tenant schemas between node groups until their sizes are even; prints the job id",
		Long: `Size the candidate schemas on each group's primary (in a session as the owner), plan moves that
bring every group within the threshold of the mean (largest first, never overshooting), print
the plan on standard error and submit one job of moves, which prints its id. Moves out of a
group run before moves into it; each primary takes part in at most its max_tasks moves at once.
One rebalance of yours runs at a time: a second is refused (exit 4, the first one's id on
standard output). With --dry-run nothing is submitted; -o json prints the plan as JSON.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.rebalance(cmd.Context(), f) },
	}
	cmd.Flags().StringSliceVar(&f.groups, "groups", nil, "node groups to balance, at least two (comma-separated)")
	cmd.Flags().StringVar(&f.schemas, "schemas", "", "candidate schemas, a pattern with * ? [a-z] (default: all but public and PostgreSQL's own)")
	cmd.Flags().StringVar(&f.threshold, "threshold", "10%", "how far from the mean a group may stay, in percent of the mean")
	cmd.Flags().StringVar(&f.owner, "owner", "", "role that sizes the schemas and runs the moves (default: you)")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the plan only")
	cmd.AddCommand(a.rebalanceStatusCommand())
	return cmd
}

// noArgs refuses arguments as bad usage (exit 2), naming the first: for a command with
// subcommands, a misspelt one.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usage("unknown command or argument %q for %q; see `%s --help`", args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	return nil
}

// parseThreshold reads "10%" or "10" as 0.10.
func parseThreshold(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || !(v > 0 && v <= 100) {
		return 0, Usage("--threshold %q: want a percentage above 0 and at most 100, like 10%%", s)
	}
	return v / 100, nil
}

func (a *app) rebalance(ctx context.Context, f rebalanceFlags) error {
	threshold, err := parseThreshold(f.threshold)
	if err != nil {
		return err
	}
	var groups []string
	for _, g := range f.groups {
		if g = strings.TrimSpace(g); g != "" && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if len(groups) < 2 {
		return Usage("--groups: give at least two node groups, comma-separated")
	}
	candidates := rebalance.Candidates{Pattern: f.schemas}
	if err := candidates.Check(); err != nil {
		return Usage("%v", err)
	}
	c, err := a.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if !f.dryRun {
		// The key refuses a second rebalance of the same submitter; this, one of another
		// submitter that the caller may see, before it sizes anything.
		if id, err := c.Catalog().UnfinishedRebalance(ctx); err != nil {
			return classify(err)
		} else if id != 0 {
			fmt.Fprintln(a.stdout, id)
			return &ExitError{Code: ExitDuplicate, Err: fmt.Errorf("rebalance %d has not ended: one rebalance runs at a time (see `deckhand rebalance status`)", id)}
		}
	}
	p, err := a.planRebalance(ctx, c, groups, candidates, threshold, f.owner)
	if err != nil {
		return classify(err)
	}
	if f.dryRun || len(p.Steps) == 0 {
		if a.json() {
			return PrintJSON(a.stdout, p)
		}
		printPlan(a.stderr, p)
		if len(p.Steps) == 0 && !f.dryRun {
			fmt.Fprintln(a.stderr, "nothing to move: no job submitted")
		}
		return nil
	}
	printPlan(a.stderr, p)
	job, err := rebalance.Job(groups, p.Steps, f.owner)
	if err != nil {
		return classify(err)
	}
	job.Key = RebalanceKey
	id, err := c.Submit(ctx, job)
	if err != nil {
		a.printHolder(err)
		return classify(err)
	}
	if a.json() {
		p.JobID = &id
		return PrintJSON(a.stdout, p)
	}
	fmt.Fprintln(a.stdout, id)
	return nil
}

// planRebalance sizes the candidates on each group's primary and plans their moves.
func (a *app) planRebalance(ctx context.Context, c *engine.Client, groups []string, candidates rebalance.Candidates,
	threshold float64, owner string) (*rebalancePlan, error) {
	submitter, err := c.Submitter(ctx)
	if err != nil {
		return nil, err
	}
	if owner == "" {
		owner = submitter
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	primaries, err := rebalance.Primaries(nodes, groups)
	if err != nil {
		return nil, err
	}
	// Schemas that another job moves, or is to move, are left where they are: the catalog
	// would refuse the whole job for a move of one of them.
	moving, err := c.Catalog().LiveMoves(ctx)
	if err != nil {
		return nil, err
	}
	busy := map[string]string{}
	for _, m := range moving {
		busy[m.Schema] = fmt.Sprintf("being moved by job %d", m.JobID)
	}
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	sizing, err := rebalance.Size(ctx, pools, primaries, owner, submitter, candidates, busy)
	if err != nil {
		if nodeconn.Refused(err) {
			return nil, Usage("%v", err)
		}
		return nil, err
	}
	lanes := map[string]int{}
	for g, n := range primaries {
		lanes[g] = n.MaxTasks
	}
	plan := rebalance.PlanMoves(groups, sizing.Schemas, threshold)
	if plan.Moves == nil { // a list in JSON, as steps and skipped
		plan.Moves = []rebalance.Move{}
	}
	skipped := sizing.Skipped
	if skipped == nil {
		skipped = []string{}
	}
	return &rebalancePlan{Plan: plan, Steps: rebalance.Schedule(plan.Moves, lanes), Skipped: skipped,
		candidates: len(sizing.Schemas), owner: owner, pattern: candidates.Pattern}, nil
}

// printPlan writes the plan for people: the groups before and after, then the moves.
func printPlan(w io.Writer, p *rebalancePlan) {
	low, high := p.Bounds()
	fmt.Fprintf(w, "mean %s per group, within %.0f%%: %s to %s\n", humanBytes(int64(p.Mean)), p.Threshold*100,
		humanBytes(int64(low)), humanBytes(int64(high)))
	groups := make([]string, 0, len(p.Before))
	for g := range p.Before {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	rows := make([][]string, 0, len(groups))
	for _, g := range groups {
		rows = append(rows, []string{g, humanBytes(p.Before[g]), humanBytes(p.After[g])})
	}
	PrintTable(w, []string{"group", "before", "after"}, rows) //nolint:errcheck
	if len(p.Steps) > 0 {
		fmt.Fprintln(w)
		rows = rows[:0]
		for i, s := range p.Steps {
			after := make([]string, len(s.DependsOn))
			for j, d := range s.DependsOn {
				after[j] = rebalance.TaskName(d)
			}
			rows = append(rows, []string{rebalance.TaskName(i), s.Schema, s.From, s.To, humanBytes(s.Bytes), strings.Join(after, ",")})
		}
		PrintTable(w, []string{"move", "schema", "from", "to", "size", "after"}, rows) //nolint:errcheck
	}
	for _, s := range p.Skipped {
		fmt.Fprintln(w, "left out: "+s)
	}
	if p.candidates == 0 {
		pattern := "any schema"
		if p.pattern != "" {
			pattern = fmt.Sprintf("--schemas %q", p.pattern)
		}
		fmt.Fprintf(w, "no candidate schema: on these groups' primaries, role %s may use no schema matching %s\n", p.owner, pattern)
	} else if len(p.Steps) == 0 && p.Balanced {
		fmt.Fprintf(w, "%d schema(s) already within the threshold: nothing to move\n", p.candidates)
	}
	if !p.Balanced {
		fmt.Fprintln(w, "no plan of moves brings every group within the threshold: this one comes closest that the planner found")
	}
}

func (a *app) rebalanceStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the current (or last) rebalance: moves done, running and left, with their sizes",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Catalog().LatestRebalance(cmd.Context())
			if errors.Is(err, catalog.ErrNotFound) {
				return Usage("no rebalance to show: none was submitted that you may see")
			}
			if err != nil {
				return classify(err)
			}
			if a.json() {
				return PrintJSON(a.stdout, s)
			}
			printRebalanceStatus(a.stdout, s)
			return nil
		},
	}
}

func printRebalanceStatus(w io.Writer, s *deckhandtype.RebalanceStatus) {
	fmt.Fprintf(w, "rebalance job %d: %s\n  %s\n", s.JobID, s.State, s.Description)
	for _, c := range []struct {
		what string
		n    deckhandtype.MoveCount
	}{{"done", s.Done}, {"running", s.Running}, {"left", s.Left}, {"failed or cancelled", s.Failed}} {
		fmt.Fprintf(w, "  %-19s %d moves, %s\n", c.what, c.n.Moves, humanBytes(c.n.Bytes))
	}
	fmt.Fprintln(w)
	rows := make([][]string, 0, len(s.Moves))
	for _, m := range s.Moves {
		errText := ""
		if m.LastError != nil {
			errText = *m.LastError
		}
		rows = append(rows, []string{m.Name, m.Schema, m.From, m.To, humanBytes(m.Bytes), string(m.State), errText})
	}
	PrintTable(w, []string{"move", "schema", "from", "to", "size", "state", "error"}, rows) //nolint:errcheck
}
