package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/spec"
)

// Status draws a live status line; *cli.Progress implements it. Update redraws the line on a
// terminal and does nothing elsewhere; Done replaces it with a permanent line.
type Status interface {
	Terminal() bool
	Update(line string)
	Done(final string)
}

// plainStatus is the Status for a plain writer: only permanent lines appear.
type plainStatus struct{ w io.Writer }

func (plainStatus) Terminal() bool      { return false }
func (plainStatus) Update(string)       {}
func (p plainStatus) Done(final string) { fmt.Fprintln(p.w, final) }

func (r *runner) bar(done, total, width int) string {
	if r.opts.Bar != nil {
		return r.opts.Bar(done, total, width)
	}
	return fmt.Sprintf("%d/%d", done, total)
}

// watcher turns Wait's progress callbacks into a live status line on a terminal, or into a
// log of task state changes elsewhere. The log is a timeline in catalog time: a task that
// starts and ends between two callbacks still gets both lines, and lines are held back
// briefly so that one discovered late is not printed after a later one.
type watcher struct {
	r        *runner
	client   *engine.Client
	id       int64
	since    time.Time // local time of the submission, anchoring catalog times to ours
	workers  map[int64]string
	printed  map[string]bool
	width    int // of the task name column
	pending  []event
	lastTime time.Duration
}

type event struct {
	at   time.Duration // since the job was created, in catalog time
	text string
}

// holdBack is how long a state change may go unnoticed: Wait's callback interval plus slack.
const holdBack = 500 * time.Millisecond

func (w *watcher) update(ctx context.Context, j deckhandtype.Job) {
	d, err := w.client.Job(ctx, j.ID)
	if err != nil {
		return
	}
	if w.r.status.Terminal() {
		var running []string
		for _, t := range d.Tasks {
			if t.State == deckhandtype.TaskRunning || t.State == deckhandtype.TaskCancelling {
				running = append(running, t.Name)
			}
		}
		line := fmt.Sprintf("job %d %s %s %s", d.ID, d.State, w.r.bar(d.TasksDone, d.TasksTotal, 20), since(w.since))
		if len(running) > 0 {
			line += "  running: " + strings.Join(running, " ")
		}
		w.r.status.Update(truncate(line, 78))
		return
	}
	w.collect(d)
	horizon := time.Since(w.since) - holdBack
	if d.State.Terminal() {
		horizon = 1<<63 - 1
	}
	w.print(horizon)
}

// flush prints every event still held back.
func (w *watcher) flush() { w.print(1<<63 - 1) }

// print prints, in time order, the held-back events that happened up to horizon.
func (w *watcher) print(horizon time.Duration) {
	slices.SortStableFunc(w.pending, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	n := 0
	for n < len(w.pending) && w.pending[n].at <= horizon {
		e := w.pending[n]
		// Catalog and local clocks may disagree a little; never print time going backwards.
		w.lastTime = max(w.lastTime, e.at)
		w.r.printf("%8s  %s\n", roundDuration(w.lastTime), e.text)
		n++
	}
	w.pending = w.pending[n:]
}

// collect queues the events of d not seen before.
func (w *watcher) collect(d *engine.JobDetail) {
	add := func(key string, at time.Time, format string, args ...any) {
		if w.printed[key] {
			return
		}
		w.printed[key] = true
		w.pending = append(w.pending, event{at: at.Sub(d.CreatedAt), text: fmt.Sprintf(format, args...)})
	}
	for _, a := range d.Attempts {
		name := fmt.Sprintf("%-*s", w.width, a.TaskName)
		key := fmt.Sprintf("%d/%d", a.TaskID, a.Token)
		worker := "-"
		if a.WorkerID != nil {
			worker = workerName(w.workers, *a.WorkerID)
		}
		nth := ""
		if a.Attempt > 1 {
			nth = fmt.Sprintf(" (attempt %d)", a.Attempt)
		}
		add("start "+key, a.StartedAt, "%s running on %s%s", name, worker, nth)
		if a.FinishedAt == nil {
			continue
		}
		msg := ""
		if a.Message != nil {
			msg = ": " + spec.OneLine(*a.Message)
			if a.SQLState != nil {
				msg = ": " + *a.SQLState + " " + msg[2:]
			}
		}
		switch a.Outcome {
		case deckhandtype.OutcomeDone:
			add("end "+key, *a.FinishedAt, "%s done in %s", name, roundDuration(a.FinishedAt.Sub(a.StartedAt)))
		case deckhandtype.OutcomeRetry:
			add("end "+key, *a.FinishedAt, "%s failed, will retry%s", name, msg)
		default:
			add("end "+key, *a.FinishedAt, "%s %s%s", name, a.Outcome, msg)
		}
	}
	for _, t := range d.Tasks {
		if (t.State == deckhandtype.TaskUnscheduled || t.State == deckhandtype.TaskCancelled) && t.FinishedAt != nil {
			why := ""
			if t.State == deckhandtype.TaskUnscheduled {
				why = ": a task it depends on failed"
			}
			add("final "+strconv.FormatInt(t.ID, 10), *t.FinishedAt, "%-*s %s%s", w.width, t.Name, t.State, why)
		}
	}
}

func workerName(names map[int64]string, id int64) string {
	if n, ok := names[id]; ok {
		return n
	}
	return "worker " + strconv.FormatInt(id, 10)
}
