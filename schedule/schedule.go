// Package schedule submits jobs on a timetable: a schedule holds a job spec, a timing (a cron
// expression in a time zone, or an interval) and rules for overlaps and missed windows, and
// the leader submits the spec at each due time for the schedule's submitter.
//
// Each due time fires exactly once, across leader failovers and restarts: the leader records
// the firing, writes the job and moves the schedule's next due time in one catalog
// transaction, guarded by the due time it read (catalog.FireSchedule). A due time that passed
// while no leader ran — later than Service.LateWindow when the leader gets to it — is a missed
// window: the due times it holds fire once, or not at all with --skip-missed. Every firing
// makes the checks `deckhand job submit` makes, for the schedule's submitter: a submitter who
// lost a right gets a failed firing, not a job.
package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/spec"
)

// Feature is the schedule feature: its leader service fires due schedules.
func Feature() engine.Feature {
	return engine.Feature{
		Name:     "schedule",
		Services: func(d engine.Deps) []engine.Service { return []engine.Service{NewService(d)} },
	}
}

// Request is a schedule to add.
type Request struct {
	Name       string
	Job        *spec.Job
	Cron       string
	Timezone   string
	Every      time.Duration
	SkipMissed bool
	NoOverlap  bool
}

// Add checks a schedule — its timing, and its job as `deckhand job submit` checks one, for the
// client's catalog role, who becomes the schedule's submitter — and writes it. It returns the
// schedule's id and first due time. Bad input is reported as engine.IsInvalid errors.
func Add(ctx context.Context, c *engine.Client, r Request) (int64, time.Time, error) {
	timing, err := ParseTiming(r.Cron, r.Timezone, r.Every)
	if err != nil {
		return 0, time.Time{}, spec.Invalidf("schedule %s: %v", r.Name, err)
	}
	cat := c.Catalog()
	submitter, searchPath, now, err := cat.SessionContext(ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	if _, err := c.Prepare(ctx, r.Job, submitter, searchPath); err != nil {
		return 0, time.Time{}, err
	}
	// The spec is kept as given, with what submitting it now would fill in written out: each
	// task's owner (the submitter) and the search_path of this session.
	job := *r.Job
	job.Tasks = append([]spec.Task(nil), r.Job.Tasks...)
	for i := range job.Tasks {
		if job.Tasks[i].Owner == "" {
			job.Tasks[i].Owner = submitter
		}
	}
	if job.SearchPath == "" {
		job.SearchPath = searchPath
	}
	doc, err := json.Marshal(&job)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("encode the job spec: %w", err)
	}
	next := timing.Next(now)
	id, err := cat.AddSchedule(ctx, catalog.NewSchedule{Name: r.Name, Spec: doc, Cron: r.Cron, Timezone: r.Timezone,
		Every: r.Every, SkipMissed: r.SkipMissed, NoOverlap: r.NoOverlap, NextRunAt: &next})
	return id, next, err
}

// Resume lets a paused schedule fire again from its first due time after now. It returns the
// schedule's next due time as the catalog holds it afterwards: a schedule that was not paused
// keeps the one it had (zero when it has none to show).
func Resume(ctx context.Context, c *engine.Client, name string) (time.Time, error) {
	cat := c.Catalog()
	s, err := cat.Schedule(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	var every time.Duration = s.Every()
	cronExpr, tz := "", ""
	if s.Cron != nil {
		cronExpr = *s.Cron
	}
	if s.Timezone != nil {
		tz = *s.Timezone
	}
	var next *time.Time
	if timing, err := ParseTiming(cronExpr, tz, every); err == nil {
		_, _, now, err := cat.SessionContext(ctx)
		if err != nil {
			return time.Time{}, err
		}
		n := timing.Next(now)
		next = &n
	}
	if err := cat.ResumeSchedule(ctx, name, next); err != nil {
		return time.Time{}, err
	}
	// Read back rather than return next: the catalog resumes a paused schedule only, and
	// a leader may already have moved a resumed one on.
	s, err = cat.Schedule(ctx, name)
	if err != nil || s.NextRunAt == nil {
		return time.Time{}, err
	}
	return *s.NextRunAt, nil
}
