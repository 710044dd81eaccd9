package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

func (a *app) jobWait() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID [--timeout D]",
		Short: "Wait for a job to end: exit 0 finished, 1 failed or cancelled, 3 timeout",
		Args:  exactArgs(1, "a job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := jobID(args[0])
			if err != nil {
				return err
			}
			if timeout < 0 {
				return Usage("--timeout must not be negative, got %s (0 waits forever)", timeout)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			c, err := a.waitForClient(cmd.Context(), ctx)
			if err != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil {
					return Timeout("timed out after %s waiting for job %d: the catalog was unreachable (%w)", timeout, id, err)
				}
				if errors.Is(err, catalog.ErrNoAnswer) {
					return stillRunning(err, id)
				}
				return err
			}
			defer c.Close()
			bar := NewProgress(a.rawStderr)
			var progress func(deckhandtype.Job)
			if bar.Terminal() {
				var running string // the running statements' progress, read about every second
				var readAt time.Time
				progress = func(j deckhandtype.Job) {
					if time.Since(readAt) >= time.Second {
						readAt = time.Now()
						running = ""
						if ps, err := c.Progress(ctx, j.ID); err == nil && len(ps) > 0 {
							running = fmt.Sprintf("  %s: %s", ps[0].Task, ps[0].TaskProgress)
							if len(ps) > 1 {
								running += fmt.Sprintf(" (+%d more)", len(ps)-1)
							}
						}
					}
					bar.Update(fmt.Sprintf("job %d %s %s %s%s", j.ID, j.State, Bar(j.TasksDone, j.TasksTotal, 30), durationText(j), running))
				}
			}
			job, err := c.Wait(ctx, id, progress)
			if errors.Is(err, context.DeadlineExceeded) && cmd.Context().Err() == nil {
				bar.Clear()
				if job.ID == 0 {
					// The deadline struck while reading the job: read it once more to say
					// what state it is in (or that it does not exist).
					rctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
					job, err = c.JobRow(rctx, id)
					cancel()
					if err != nil {
						return classify(err)
					}
				}
				if !job.State.Terminal() {
					return Timeout("timed out after %s waiting for job %d: still %s, %s", timeout, id, job.State, progressText(job))
				}
				// The job had ended before the deadline: it is not a timeout.
				err = nil
			}
			if errors.Is(err, catalog.ErrNoAnswer) {
				bar.Clear()
				return stillRunning(err, id)
			}
			if err != nil {
				bar.Clear()
				return classify(err)
			}
			if a.json() {
				bar.Clear()
				return waitResult(job, PrintJSON(a.stdout, job))
			}
			bar.Done(fmt.Sprintf("job %d %s: %s in %s", job.ID, job.State, progressText(job), durationText(job)))
			if job.State == deckhandtype.JobFailed {
				return &ExitError{Code: ExitFailed, Err: fmt.Errorf("job %d failed%s", job.ID, failureReason(cmd.Context(), c, job.ID))}
			}
			return waitResult(job, nil)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (exit code 3); 0 waits forever")
	return cmd
}

// waitForClient opens the catalog as client does, but waits out a catalog that cannot be
// reached (restarting, failing over), retrying with backoff until wait ends: a script that
// waits for a job should not fail because the catalog restarted as it began. Each attempt
// runs under ctx, bounded by 10 s or what is left of wait's time, but never less than a
// second: a wait whose time is (nearly) up still answers once from a catalog that answers,
// and one that does not answer keeps the wait to its --timeout.
//
// A catalog that takes connections but never answers is not waited out for ever: after
// waitSilentConnects attempts in a row got no reply, the error wraps catalog.ErrNoAnswer.
func (a *app) waitForClient(ctx, wait context.Context) (*engine.Client, error) {
	delay := 100 * time.Millisecond
	silent := 0
	for {
		bound := 10 * time.Second
		if deadline, ok := wait.Deadline(); ok {
			bound = min(bound, max(time.Until(deadline), time.Second))
		}
		actx, cancel := context.WithTimeout(ctx, bound)
		c, err := a.client(actx)
		cancel()
		if err == nil || !engine.CatalogUnreachable(err) {
			return c, err
		}
		if catalog.IsTimeout(err) && ctx.Err() == nil && wait.Err() == nil {
			if silent++; silent >= waitSilentConnects {
				return nil, fmt.Errorf("%w: %d connections in a row got no reply", catalog.ErrNoAnswer, silent)
			}
		} else {
			silent = 0
		}
		slog.Debug("the catalog is unreachable; retrying", "err", err, "in", delay)
		select {
		case <-wait.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// waitSilentConnects is how many attempts in a row to open the catalog may get no reply
// before job wait gives up, as engine.Wait gives up after as many silent reads.
const waitSilentConnects = 3

// stillRunning is the error of a wait for job id that gave up on a catalog that stopped
// answering (err): the job itself is not affected, and the user should look again later.
func stillRunning(err error, id int64) error {
	return Failed("%v; job %d may still be running: see `deckhand job show %d`", err, id, id)
}

// failureReason is ": task NAME: ERROR (see `deckhand job show ID`)" for the first failed task
// of a failed job, so that the line that says the job failed also says why; "" when it
// cannot be read.
func failureReason(ctx context.Context, c *engine.Client, id int64) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.Job(ctx, id)
	if err != nil {
		return ""
	}
	for _, t := range d.Tasks {
		if t.State == deckhandtype.TaskFailed && t.LastError != nil {
			return fmt.Sprintf(": task %s: %s (see `deckhand job show %d`)", t.Name, t.LastError.String(), id)
		}
	}
	return ""
}

func waitResult(job deckhandtype.Job, err error) error {
	if err != nil {
		return err
	}
	if job.State != deckhandtype.JobFinished {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("job %d %s", job.ID, job.State)}
	}
	return nil
}
