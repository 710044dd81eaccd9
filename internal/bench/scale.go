package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
)

// Scale holds the figures with Options.Finished finished tasks in the catalog.
type Scale struct {
	TasksPerS, NodeTasksPerS float64
	// SQLTasksPerS is the mean of two SQL runs at scale, one after the other; EmptySQLTasksPerS
	// the mean of the main SQL run (before the finished tasks were loaded) and of one on a fresh
	// catalog right after the runs at scale (0 when there were no SQL tasks).
	SQLTasksPerS, EmptySQLTasksPerS float64
	SQLCost                         *sqlCost
	IdleClaimMS                     float64
}

// sqlRatio is the SQL rate at scale against the empty catalog's.
func (s *Scale) sqlRatio() float64 { return ratio(s.SQLTasksPerS, s.EmptySQLTasksPerS) }

// scale loads the finished tasks and measures again: noop, node-bound and SQL tasks, and an
// idle claim. The SQL rate, which this machine's drifting speed moved by a third between runs
// a minute apart, is compared run for run: the runs go empty (the main run, at emptySQL tasks/s),
// at scale, at scale, empty (a fresh catalog on the same node), and each side is the mean of
// its two.
func scale(ctx context.Context, admin *pgx.Conn, server, nodeDSN string, client *engine.Client, emptySQL float64,
	o Options, out io.Writer, cpu *sqlCPU) (*Scale, error) {
	fmt.Fprintf(out, "scale: loading %d finished tasks into the catalog...\n", o.Finished)
	if err := preloadFinished(ctx, client, o.Finished); err != nil {
		return nil, err
	}
	s := &Scale{}
	d, err := runJob(ctx, client, noopJob(o.Tasks, ""))
	if err != nil {
		return nil, err
	}
	s.TasksPerS = rate(o.Tasks, d)
	fmt.Fprintf(out, "scale: noop:  %d tasks in %s = %.0f tasks/s\n", o.Tasks, d.Round(time.Millisecond), s.TasksPerS)
	if s.NodeTasksPerS, s.SQLTasksPerS, s.SQLCost, err = nodeRuns(ctx, client, o, out, "scale: ", cpu); err != nil {
		return nil, err
	}
	if o.SQLTasks > 0 {
		d, err := runJob(ctx, client, sqlJob(o.SQLTasks, sqlNode))
		if err != nil {
			return nil, err
		}
		again := rate(o.SQLTasks, d)
		fmt.Fprintf(out, "scale: sql:   again: %.0f tasks/s\n", again)
		s.SQLTasksPerS = (s.SQLTasksPerS + again) / 2
		empty, err := sqlOnFreshCatalog(ctx, admin, server, nodeDSN, o)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "scale: sql:   on a fresh catalog, empty: %.0f tasks/s\n", empty)
		s.EmptySQLTasksPerS = (emptySQL + empty) / 2
	}
	if s.IdleClaimMS, err = idleClaim(ctx, client, 200); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "scale: idle claim (nothing runnable): %.2f ms (median of 200)\n", s.IdleClaimMS)
	return s, nil
}

// sqlOnFreshCatalog is the rate of the SQL run (Options.SQLTasks `SELECT 1` tasks on one node of
// max_tasks Options.NodeMax) on a fresh scratch catalog with workers of its own, after a
// warm-up job of a task per slot of the node.
func sqlOnFreshCatalog(ctx context.Context, admin *pgx.Conn, server, nodeDSN string, o Options) (float64, error) {
	dsn, client, dropCatalog, err := scratchCatalog(ctx, admin, server)
	if err != nil {
		return 0, err
	}
	defer dropCatalog()
	if err := client.AddNode(ctx, deckhandtype.Node{Name: sqlNode, DSN: nodeDSN, MaxTasks: o.NodeMax}); err != nil {
		return 0, err
	}
	stop, err := startWorkers(ctx, dsn, o, &recorder{})
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := runJob(ctx, client, sqlJob(o.NodeMax, sqlNode)); err != nil {
		return 0, err
	}
	d, err := runJob(ctx, client, sqlJob(o.SQLTasks, sqlNode))
	if err != nil {
		return 0, err
	}
	return rate(o.SQLTasks, d), nil
}

func (r *Result) printScale(out io.Writer) {
	s := r.Scale
	fmt.Fprintf(out, "scale: with the finished tasks: noop %.0f%%, node-bound %.0f%%, SQL %.0f%% of the empty catalog's\n",
		100*ratio(s.TasksPerS, r.TasksPerS), 100*ratio(s.NodeTasksPerS, r.NodeTasksPerS), 100*s.sqlRatio())
	if s.EmptySQLTasksPerS > 0 {
		fmt.Fprintf(out, "scale: SQL runs in the order empty, at scale, at scale, empty: %.0f tasks/s at scale against %.0f empty (means of two)\n",
			s.SQLTasksPerS, s.EmptySQLTasksPerS)
	}
}
