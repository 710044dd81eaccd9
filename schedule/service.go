package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/spec"
	"golang.org/x/sync/errgroup"
)

// Defaults of a Service.
const (
	// DefaultLateWindow: a due time later than this when the leader gets to it passed while
	// no leader ran. Due times up to this late (a leader failing over) each fire; older ones
	// are a missed window, which fires once (or not at all with --skip-missed).
	DefaultLateWindow = time.Minute
	// DefaultPoll bounds how long the service sleeps, so that new schedules are seen.
	DefaultPoll = time.Second
	// DefaultRunRetention is how long firings are kept (each schedule's latest always is).
	DefaultRunRetention = 30 * 24 * time.Hour
)

// Service is the leader service that fires due schedules.
type Service struct {
	cat   *catalog.Catalog
	sub   *engine.Client
	clock engine.Clock
	log   *slog.Logger

	LateWindow   time.Duration
	Poll         time.Duration
	RunRetention time.Duration
}

// NewService builds the service on a worker's dependencies.
func NewService(d engine.Deps) *Service {
	return &Service{cat: d.Catalog, sub: d.Submissions, clock: d.Clock, log: d.Logger.With("service", "schedule"),
		LateWindow: DefaultLateWindow, Poll: DefaultPoll, RunRetention: DefaultRunRetention}
}

// Run fires schedules as they come due until ctx is done. It sleeps until the earliest due
// time, at most Poll.
func (s *Service) Run(ctx context.Context) error {
	for {
		wait := s.Poll
		if _, err := s.FireDue(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("could not fire schedules", "err", err)
			}
		} else if next, err := s.cat.NextScheduleDue(ctx); err == nil && next != nil {
			wait = min(wait, max(next.Sub(s.clock.Now()), 5*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Retain deletes firings older than RunRetention, but each schedule's latest.
func (s *Service) Retain(ctx context.Context, now time.Time) error {
	return s.cat.RetainScheduleRuns(ctx, now.Add(-s.RunRetention))
}

// FireDue handles every due time that has come on the clock, and returns how many it
// handled; its error joins those of the schedules it could not handle (they are tried again
// at the next call). A schedule it could not handle is passed over for the rest of the call,
// so that those due after it are read and fired: a hundred schedules whose node does not
// answer hold back nobody else's. Schedules due together are fired several at a time.
func (s *Service) FireDue(ctx context.Context) (int, error) {
	const batch = 100
	fired := 0
	var errs []error
	var skip []int64 // not fired in this call: tried again at the next one
	for {
		now := s.clock.Now()
		due, err := s.cat.DueSchedules(ctx, now, batch, skip)
		if err != nil {
			return fired, errors.Join(append(errs, err)...)
		}
		if len(due) == 0 {
			return fired, errors.Join(errs...)
		}
		var mu sync.Mutex
		g := errgroup.Group{}
		g.SetLimit(fireParallelism)
		for _, d := range due {
			g.Go(func() error {
				ok, err := s.fire(ctx, d, now)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && ctx.Err() == nil {
					errs = append(errs, fmt.Errorf("schedule %s: %w", d.Name, err))
				}
				if ok && err == nil {
					fired++ // it may be due again (a leader catching up after a failover)
				} else {
					skip = append(skip, d.ID)
				}
				return nil
			})
		}
		g.Wait() //nolint:errcheck // every error is kept in errs
		if ctx.Err() != nil {
			return fired, ctx.Err()
		}
	}
}

// fireParallelism bounds the schedules fired at once. A firing checks its job's nodes, and a
// node that takes connections but never answers holds its firing for nodeconn.CheckTimeout:
// in turn, a few such schedules would hold back every other schedule due behind them.
const fireParallelism = 16

// fire handles the due time of one schedule; false when nothing was recorded (another
// leader had done it, or it is to be tried again).
func (s *Service) fire(ctx context.Context, d catalog.DueSchedule, now time.Time) (bool, error) {
	timing, timingErr := ParseTiming(d.Cron, d.Timezone, d.Every)
	if d.NextRunAt == nil {
		if timingErr != nil {
			return s.cat.SetScheduleStart(ctx, d.ID, time.Time{}, "the schedule's timing is invalid: "+timingErr.Error())
		}
		return s.cat.SetScheduleStart(ctx, d.ID, timing.Next(now), "")
	}
	due := *d.NextRunAt
	f := catalog.Firing{ScheduleID: d.ID, Expected: due, DueAt: due, Outcome: deckhandtype.FiringSubmitted}
	if timingErr != nil {
		f.Outcome, f.Err = deckhandtype.FiringFailed, "the schedule's timing is invalid: "+timingErr.Error()
		return s.record(ctx, d, f)
	}
	late := now.Sub(due) > s.LateWindow
	if late {
		f.DueAt, f.Missed = latest(timing, due, now)
		if d.SkipMissed {
			f.Outcome = deckhandtype.FiringSkippedMissed
			if f.Missed > 0 && now.Sub(f.DueAt) <= s.LateWindow {
				// The window's latest due time is not late: the leader is back in time for
				// it. Skip the others, up to the one before it; it fires on its own next.
				f.DueAt, f.Missed = latest(timing, due, f.DueAt.Add(-time.Nanosecond))
			}
		}
	}
	f.Next = timing.Next(f.DueAt)
	if f.Outcome == deckhandtype.FiringSubmitted {
		job, err := s.prepare(ctx, d)
		switch {
		case err == nil:
			f.Job = &job
		case !engine.IsInvalid(err) && !late:
			// A node that does not answer the owner check now may answer in a moment: the
			// due time is tried again until it is LateWindow late.
			return false, err
		default:
			f.Outcome, f.Err, f.Refused = deckhandtype.FiringFailed, err.Error(), true
		}
	}
	return s.record(ctx, d, f)
}

// prepare checks the schedule's job as `deckhand job submit` would for its submitter.
func (s *Service) prepare(ctx context.Context, d catalog.DueSchedule) (catalog.NewJob, error) {
	job, err := spec.Parse(d.Spec)
	if err != nil {
		return catalog.NewJob{}, err
	}
	return s.sub.Prepare(ctx, job, d.SubmittedBy, "")
}

func (s *Service) record(ctx context.Context, d catalog.DueSchedule, f catalog.Firing) (bool, error) {
	res, err := s.cat.FireSchedule(ctx, f)
	if err != nil {
		return false, err
	}
	if !res.Applied {
		return false, nil
	}
	args := []any{"schedule", d.Name, "due", f.DueAt.Format(time.RFC3339Nano), "outcome", res.Outcome}
	if f.Missed > 0 {
		args = append(args, "missed", f.Missed)
	}
	switch res.Outcome {
	case deckhandtype.FiringSubmitted:
		s.log.Info("schedule fired", append(args, "job", res.JobID)...)
	case deckhandtype.FiringFailed:
		s.log.Warn("schedule firing failed", append(args, "err", res.Err)...)
	default:
		s.log.Info("schedule firing skipped", args...)
	}
	return true, nil
}

// String names the service in logs.
func (s *Service) String() string {
	return fmt.Sprintf("schedule service (late window %s)", s.LateWindow)
}
