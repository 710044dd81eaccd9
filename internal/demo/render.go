package demo

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// printf writes to the demo's output.
func (r *runner) printf(format string, args ...any) { fmt.Fprintf(r.out, format, args...) }

// printDAG draws the job's shape, generated from the node names, and what each step does.
func (r *runner) printDAG(job *spec.Job, submitter string) {
	r.printf("\nthe job: %d tasks, submitted by %s; every task runs as role %s\n\n", len(job.Tasks), submitter, r.opts.Owner)
	w, m := 0, 0
	for _, n := range r.opts.Nodes {
		w = max(w, len(n))
		m = max(m, runes(n+"/customers ─"), runes(n+"/orders ── "+n+"/index ─"))
	}
	m++
	a := w + len("/tables")
	for i, n := range r.opts.Nodes {
		join := "┤"
		if i == 0 {
			join = "┐"
		}
		r.printf("  %s ─┬─ %s┬─ %s%s\n", pad(n+"/tables", a, " "), pad(n+"/customers ─", m, "─"), pad(n+"/analyze ─", w+10, "─"), join)
		r.printf("  %s  └─ %s┘%s│\n", strings.Repeat(" ", a), pad(n+"/orders ── "+n+"/index ─", m, "─"), strings.Repeat(" ", w+12))
	}
	r.printf("  %s└─ report (on %s)\n\n", strings.Repeat(" ", a+5+m+w+13), r.opts.Nodes[0])
	r.printf("  tables     CREATE SCHEMA %s; CREATE TABLE customers, orders\n", Schema)
	r.printf("  customers  INSERT %s rows from generate_series\n", thousands(r.opts.customers()))
	r.printf("  orders     INSERT %s rows from generate_series\n", thousands(r.opts.Rows))
	r.printf("  index      CREATE INDEX CONCURRENTLY on orders (customer_id), outside a transaction\n")
	r.printf("  analyze    ANALYZE orders, customers\n")
	r.printf("  report     top 10 customers by revenue on %s, once every node is ready (fan-in)\n\n", r.opts.Nodes[0])
}

func runes(s string) int { return len([]rune(s)) }

// pad fills s up to n runes with fill.
func pad(s string, n int, fill string) string { return s + strings.Repeat(fill, max(0, n-runes(s))) }

// printSummary prints one row per task and the failures, if any.
func (r *runner) printSummary(d *engine.JobDetail, names map[int64]string) {
	lastWorker := map[int64]int64{}
	for _, a := range d.Attempts {
		if a.WorkerID != nil {
			lastWorker[a.TaskID] = *a.WorkerID
		}
	}
	r.printf("\n")
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TASK\tNODE\tOWNER\tSTATE\tATTEMPTS\tWORKER\tDURATION")
	perWorker := map[string]int{}
	for _, t := range d.Tasks {
		node, worker := "-", "-"
		if t.Node != nil {
			node = *t.Node
		}
		if id, ok := lastWorker[t.ID]; ok {
			worker = workerName(names, id)
			if t.State == deckhandtype.TaskDone {
				perWorker[worker]++
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.Name, node, t.Owner, t.State, t.Attempts, worker, taskDuration(t))
	}
	tw.Flush() //nolint:errcheck
	var failures []string
	for _, a := range d.Attempts {
		if a.Message != nil {
			code := ""
			if a.SQLState != nil {
				code = *a.SQLState + " "
			}
			failures = append(failures, fmt.Sprintf("  %s attempt %d %s: %s%s", a.TaskName, a.Attempt, a.Outcome, code, spec.OneLine(*a.Message)))
		}
	}
	if len(failures) > 0 {
		r.printf("\nerrors:\n%s\n", strings.Join(failures, "\n"))
	}
	var shares []string
	for _, n := range slices.Sorted(maps.Keys(perWorker)) {
		shares = append(shares, fmt.Sprintf("%s %d", n, perWorker[n]))
	}
	r.printf("\n")
	if len(shares) > 0 {
		r.printf("tasks per worker: %s\n", strings.Join(shares, ", "))
	}
}

func countsText(j deckhandtype.Job) string {
	s := fmt.Sprintf("%d/%d tasks done", j.TasksDone, j.TasksTotal)
	for _, c := range []struct {
		n    int
		what string
	}{{j.TasksFailed, "failed"}, {j.TasksUnscheduled, "unscheduled"}, {j.TasksCancelled, "cancelled"}} {
		if c.n > 0 {
			s += fmt.Sprintf(", %d %s", c.n, c.what)
		}
	}
	return s
}

// printVerified prints what verify read back, in one line.
func (r *runner) printVerified(res *result) {
	var parts []string
	for _, n := range res.nodes {
		parts = append(parts, fmt.Sprintf("%s %s orders + %s customers", n.name, thousands(int(n.orders)), thousands(int(n.customers))))
	}
	r.printf("verified: %s; indexes valid, analyzed, owned by %s; report on %s: %d rows, top %s\n",
		strings.Join(parts, ", "), r.opts.Owner, res.reportNode, res.reportRows, res.top)
}

func taskDuration(t deckhandtype.Task) string {
	if t.StartedAt == nil || t.FinishedAt == nil || t.FinishedAt.Before(*t.StartedAt) {
		return "-"
	}
	return roundDuration(t.FinishedAt.Sub(*t.StartedAt))
}

func jobDuration(j deckhandtype.Job) string {
	if j.FinishedAt == nil {
		return "-"
	}
	return roundDuration(j.FinishedAt.Sub(j.CreatedAt))
}

func since(t time.Time) string { return roundDuration(time.Since(t)) }

// roundDuration keeps about three significant digits: 12ms, 345ms, 1.23s, 12.3s.
func roundDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// thousands formats n with comma separators: 200,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func truncate(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n-1]) + "…"
}
