package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve on machines without a zoneinfo database too

	"github.com/robfig/cron/v3"
)

// Timing tells a schedule's due times.
type Timing interface {
	// Next is the first due time strictly after t; zero when there is none.
	Next(t time.Time) time.Time
}

// MinEvery is the shortest interval a schedule may have.
const MinEvery = time.Second

// ParseTiming reads a schedule's timing: a cron expression (five fields — minute, hour, day
// of month, month, day of week — or a descriptor such as @hourly, @daily, @weekly, @monthly)
// matched against the wall clock of timezone (default UTC), or an interval every. Exactly one
// of cronExpr and every is given.
func ParseTiming(cronExpr, timezone string, every time.Duration) (Timing, error) {
	switch {
	case cronExpr != "" && every != 0:
		return nil, errors.New("give either a cron expression or an interval, not both")
	case cronExpr == "" && every == 0:
		return nil, errors.New("give a cron expression (--cron) or an interval (--every)")
	case every != 0:
		if timezone != "" {
			return nil, errors.New("a time zone applies to cron expressions only")
		}
		if every < MinEvery {
			return nil, fmt.Errorf("interval %s: the shortest is %s", every, MinEvery)
		}
		return Every(every), nil
	}
	return ParseCron(cronExpr, timezone)
}

// Every is a timing of fixed intervals of real time: due times are the first one plus
// multiples of it, whatever the clocks on walls do.
type Every time.Duration

// Next is t plus the interval.
func (e Every) Next(t time.Time) time.Time { return t.Add(time.Duration(e)) }

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a cron expression in a time zone.
//
// Daylight saving time: the expression is matched against the zone's wall clock. A wall time
// that a change skips (02:30 on the night clocks go from 02:00 to 03:00) is due at the instant
// it would have been without the change (03:30 by the new clock); a wall time that occurs
// twice (01:30 on the night clocks go back) is due once, at its first occurrence. Due times
// never go backwards.
type Cron struct {
	spec *cron.SpecSchedule // matched against the wall clock, read as if it were UTC
	loc  *time.Location
}

// ParseCron reads a cron expression (robfig/cron's standard syntax, without seconds) in
// timezone, an IANA name (default UTC).
func ParseCron(expr, timezone string) (*Cron, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("cron %q: give the time zone with --timezone, not in the expression", expr)
	}
	if strings.HasPrefix(expr, "@every") {
		return nil, fmt.Errorf("cron %q: use --every for intervals", expr)
	}
	loc := time.UTC
	if timezone != "" {
		var err error
		if loc, err = time.LoadLocation(timezone); err != nil || timezone == "Local" {
			return nil, fmt.Errorf("unknown time zone %q (use a name such as Europe/Paris or UTC)", timezone)
		}
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron %q: not a cron expression", expr)
	}
	spec.Location = time.UTC
	c := &Cron{spec: spec, loc: loc}
	if c.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("cron %q: it never comes due", expr)
	}
	return c, nil
}

// Next is the first due time after t.
func (c *Cron) Next(t time.Time) time.Time {
	// A wall time in a skipped stretch maps to a later instant than its neighbours: near a
	// change of offset, start a little before t's wall time so that it is seen.
	w := wallClock(t.In(c.loc))
	_, before := t.Add(-4 * time.Hour).In(c.loc).Zone()
	_, after := t.Add(4 * time.Hour).In(c.loc).Zone()
	if before != after {
		w = w.Add(-3 * time.Hour)
	}
	for range 1_000_000 {
		w = c.spec.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if at := c.instant(w); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// wallClock is t's wall clock read as a UTC time.
func wallClock(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant is the instant at which the zone's wall clock shows w (a wall time read as UTC):
// the first of two when a change back repeats it; for one a change forward skips, the instant
// it would have been under the offset before the change.
func (c *Cron) instant(w time.Time) time.Time {
	_, before := w.Add(-24 * time.Hour).In(c.loc).Zone()
	_, after := w.Add(24 * time.Hour).In(c.loc).Zone()
	early := w.Add(-time.Duration(max(before, after)) * time.Second)
	late := w.Add(-time.Duration(min(before, after)) * time.Second)
	shows := func(at time.Time) bool { return wallClock(at.In(c.loc)).Equal(w) }
	switch {
	case shows(early):
		return early
	case shows(late):
		return late
	default: // skipped: the offset before the change put it after the change
		return w.Add(-time.Duration(before) * time.Second)
	}
}

// maxCounted bounds the due times latest walks through one by one.
const maxCounted = 100_000

// latest is the last due time of timing at or before now, starting from due (itself at or
// before now), and how many due times came before it from due on (at least maxCounted when
// the window is longer: then only its last day is walked through).
func latest(timing Timing, due, now time.Time) (time.Time, int) {
	if e, ok := timing.(Every); ok {
		n := int(now.Sub(due) / time.Duration(e))
		return due.Add(time.Duration(n) * time.Duration(e)), n
	}
	n := 0
	for {
		if n == maxCounted {
			// A window this long is counted no further: only its last day is walked through.
			if skip := timing.Next(now.Add(-24 * time.Hour)); skip.After(due) && !skip.After(now) {
				due = skip
			}
		}
		next := timing.Next(due)
		if next.IsZero() || next.After(now) {
			return due, n
		}
		due, n = next, n+1
	}
}
