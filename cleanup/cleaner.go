package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/notifier"
)

// Cleaner removes the resources of ended operations. As an engine.Service it runs on the
// leader: it wakes when a job ends (channel deckhand_job) or an operation finishes (channel
// deckhand_cleanup), on a timer as a fallback, and every ProbeInterval while a resource it must
// remove is in use. As an engine.Retainer it deletes what ended long ago. RunOnce is one pass
// on demand (`deckhand cleanup run`); any number of cleaners may run at once, as each record
// is locked while it is being removed.
//
// Zero fields take the defaults documented on them.
type Cleaner struct {
	Catalog *catalog.Catalog
	Pools   *nodeconn.Pools // removals connect to nodes as the operation's owner
	Logger  *slog.Logger
	// Notifier wakes Run on notifications; nil: Run makes its own and runs it while it runs.
	Notifier *notifier.Notifier

	// LockTimeout bounds how long a removal may make other sessions queue behind its lock
	// request; default: the catalog setting cleanup_lock_timeout, else 100ms.
	LockTimeout time.Duration
	// Interval is the fallback between passes when no notification arrives; default 1s.
	Interval time.Duration
	// ProbeInterval is how often resources found in use are probed (pg_locks, active slots),
	// so that they are removed within about this long of being released; default 100ms.
	ProbeInterval time.Duration
	// InUseBackoff is the first wait before retrying a resource found in use that the probe
	// cannot see (publications, subscriptions, schemas), doubling up to 1 minute; default 1s.
	InUseBackoff time.Duration
	// ErrorBackoff is the first wait after a transient error, doubling up to 5 minutes; default 1s.
	ErrorBackoff time.Duration
	// MaxErrors is how many transient errors a record may meet before it fails and waits for an
	// operator; default 20.
	MaxErrors int
	// Retention is how long ended operations with their removed and forgotten records are
	// kept (see Retain); default 7 days.
	Retention time.Duration
	// RemovalTimeout bounds one removal attempt (a prefix with many objects, a node that does
	// not answer); the record is retried after it. Default 5 minutes.
	RemovalTimeout time.Duration
}

// New returns a cleaner with default settings.
func New(cat *catalog.Catalog, pools *nodeconn.Pools) *Cleaner {
	return &Cleaner{Catalog: cat, Pools: pools}
}

// Log is the cleaner's logger, slog's default when none was given.
func (c *Cleaner) Log() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// LockTimeoutFor is how long a removal may make others queue behind its lock: LockTimeout when
// set, else the catalog setting cleanup_lock_timeout, else the default.
func (c *Cleaner) LockTimeoutFor(ctx context.Context) time.Duration {
	if c.LockTimeout > 0 {
		return c.LockTimeout
	}
	return LockTimeout(ctx, c.Catalog)
}

// Action is what one removal attempt did.
type Action struct {
	Record    int64    `json:"record"`
	Operation int64    `json:"operation"`
	Job       int64    `json:"job"`
	Resource  Resource `json:"resource"`
	Policy    Policy   `json:"policy"`
	// Outcome is removed, in_use, retrying, pinned, failed or node_removed.
	Outcome deckhandtype.CleanupState `json:"outcome"`
	Error   string                    `json:"error,omitempty"`
}

func (a Action) String() string {
	s := fmt.Sprintf("%s %s %s (record %d, operation %d, job %d)", a.Outcome, a.Resource.Type, a.Resource.Display(), a.Record, a.Operation, a.Job)
	if a.Error != "" {
		s += ": " + a.Error
	}
	return s
}

// Report is what a pass did.
type Report struct {
	// Decided lists orphaned operations the pass ended (their job ended, their worker died).
	Decided []catalog.EndedOperation `json:"decided"`
	Actions []Action                 `json:"actions"`
	// Waiting counts records still waiting because their resource is in use.
	Waiting int `json:"waiting"`
}

// Count returns how many records the pass left with the outcome: a record tried more than
// once (found in use, then removed) counts once, by its last try.
func (r *Report) Count(outcome deckhandtype.CleanupState) int {
	last := map[int64]deckhandtype.CleanupState{}
	for _, a := range r.Actions {
		last[a.Record] = a.Outcome
	}
	n := 0
	for _, o := range last {
		if o == outcome {
			n++
		}
	}
	return n
}

// Summary is a one-line account of the pass.
func (r *Report) Summary() string {
	parts := []string{fmt.Sprintf("%d operation(s) decided", len(r.Decided))}
	for _, o := range []deckhandtype.CleanupState{deckhandtype.CleanupRemoved, deckhandtype.CleanupInUse, deckhandtype.CleanupRetrying, deckhandtype.CleanupPinned, deckhandtype.CleanupFailed, deckhandtype.CleanupNodeRemoved} {
		if n := r.Count(o); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
	}
	if r.Waiting > 0 {
		parts = append(parts, fmt.Sprintf("%d still in use (removed as soon as free)", r.Waiting))
	}
	if len(r.Actions) == 0 {
		parts = append(parts, "nothing to remove")
	}
	return strings.Join(parts, ", ")
}

// RunOptions tune RunOnce.
type RunOptions struct {
	// Wait keeps retrying resources found in use, as soon as they are free, for up to this long.
	Wait time.Duration
	// Now tries every due record at once, even those waiting for their next attempt.
	Now bool
	// probeOnly skips deciding operations: the service's quick passes while resources wait.
	probeOnly bool
}

// RunOnce is one pass: it decides orphaned operations, marks records of removed nodes, and
// tries every due record whose turn has come (all of them with o.Now), in dependency order.
func (c *Cleaner) RunOnce(ctx context.Context, o RunOptions) (*Report, error) {
	return c.passWith(ctx, 0, o)
}

func (c *Cleaner) pass(ctx context.Context, opID int64, wait time.Duration) (*Report, error) {
	return c.passWith(ctx, opID, RunOptions{Wait: wait, Now: true})
}

func (c *Cleaner) passWith(ctx context.Context, opID int64, o RunOptions) (*Report, error) {
	rep := &Report{Decided: []catalog.EndedOperation{}, Actions: []Action{}}
	if opID == 0 && !o.probeOnly {
		ended, err := c.Catalog.DecideOperations(ctx)
		if err != nil {
			return rep, err
		}
		rep.Decided = append(rep.Decided, ended...)
		for _, e := range ended {
			c.Log().Info("operation orphaned; its records are resolved by policy", "operation", e.ID, "job", e.JobID, "state", e.State, "reason", e.Reason)
		}
		if _, err := c.Catalog.MarkNodeRemoved(ctx); err != nil {
			return rep, err
		}
	}
	deadline := time.Now().Add(o.Wait)
	handled := map[int64]bool{}
	inUse := map[int64]bool{} // handled records whose last try found them in use
	var force []int64
	for {
		for {
			forced := map[int64]bool{}
			for _, id := range force {
				forced[id] = true
			}
			var skip []int64
			for id := range handled {
				if !forced[id] {
					skip = append(skip, id)
				}
			}
			rec, out, err := c.claim(ctx, catalog.CleanupClaim{OperationID: opID, Force: force, Skip: skip, IgnoreBackoff: o.Now})
			if err != nil {
				return rep, err
			}
			if rec == nil {
				break
			}
			handled[rec.ID] = true
			inUse[rec.ID] = out.State == deckhandtype.CleanupInUse
			force = remove(force, rec.ID)
			a := Action{Record: rec.ID, Operation: rec.OperationID, Job: rec.JobID, Resource: rec.Resource(),
				Policy: rec.Policy, Outcome: out.State, Error: out.Error}
			rep.Actions = append(rep.Actions, a)
		}
		waiting, err := c.Catalog.WaitingInUse(ctx, opID)
		if err != nil {
			return rep, err
		}
		rep.Waiting = len(waiting)
		if force = c.probe(ctx, waiting); len(force) > 0 {
			continue
		}
		if !time.Now().Before(deadline) {
			return rep, nil
		}
		// Records this pass has not touched yet are being removed by another cleaner (they
		// were locked): wait for them too, as the caller asked to wait.
		ready, err := c.Catalog.ReadyCleanup(ctx, opID, o.Now)
		if err != nil {
			return rep, err
		}
		// A record this pass found in use whose backoff ran out meanwhile is no longer among
		// the waiting: it is tried again (after the pause below) rather than left, which
		// ended the pass before the deadline with the resource reported in use.
		for _, id := range ready {
			if inUse[id] && !slices.ContainsFunc(waiting, func(w catalog.WaitingRecord) bool { return w.ID == id }) {
				delete(handled, id)
				delete(inUse, id)
			}
		}
		untouched := slices.DeleteFunc(ready, func(id int64) bool { return handled[id] })
		if len(waiting) == 0 && len(untouched) == 0 {
			return rep, nil
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(min(orDefault(c.ProbeInterval, 100*time.Millisecond), time.Until(deadline))):
		}
	}
}

func remove(ids []int64, id int64) []int64 {
	out := ids[:0]
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// claim takes one ready record and tries to remove it, logging what happened.
func (c *Cleaner) claim(ctx context.Context, sel catalog.CleanupClaim) (*catalog.DueRecord, *catalog.CleanupOutcome, error) {
	lt := c.LockTimeoutFor(ctx)
	rec, out, err := c.Catalog.ClaimCleanup(ctx, sel, func(ctx context.Context, rec *catalog.DueRecord) catalog.CleanupOutcome {
		return c.removeRecord(ctx, rec, lt)
	})
	if rec == nil || err != nil {
		return rec, out, err
	}
	args := []any{"record", rec.ID, "operation", rec.OperationID, "job", rec.JobID, "resource", string(rec.Type) + " " + rec.Resource().Display()}
	switch out.State {
	case deckhandtype.CleanupRemoved:
		c.Log().Info("removed", args...)
	case deckhandtype.CleanupInUse, deckhandtype.CleanupPinned:
		c.Log().Debug("cleanup waits", append(args, "reason", out.State, "err", out.Error, "retry_in", out.Backoff)...)
	case deckhandtype.CleanupRetrying:
		c.Log().Warn("cleanup failed; will retry", append(args, "err", out.Error, "retry_in", out.Backoff)...)
	default:
		c.Log().Error("cleanup gave up; see `deckhand cleanup list`", append(args, "state", out.State, "err", out.Error)...)
	}
	return rec, out, nil
}

// Run is the leader service: a pass whenever a job ends or an operation finishes (notified;
// within a budget while the passes find nothing to do), every Interval as a fallback, and
// every ProbeInterval while resources wait to be free.
func (c *Cleaner) Run(ctx context.Context) error {
	nt := c.Notifier
	if nt == nil {
		nt = notifier.New(c.Catalog.Pool.Config().ConnConfig, c.Log())
		nctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); nt.Run(nctx) }()
		defer func() { stop(); <-done }()
	}
	// A pass reads the catalog, so one waiting notification is as good as many; the buffer
	// lets job state changes that end nothing queue up without crowding out one that does.
	// Should it overflow all the same, the next pass comes after Interval.
	sub := nt.Subscribe(256, catalog.ChannelJob, catalog.ChannelCleanup)
	defer sub.Close()
	budget := notifier.NewBudget(wakeBurst, wakeEvery)
	interval := orDefault(c.Interval, time.Second)
	var lastFull time.Time
	probeOnly := false
	for {
		next := interval
		// Quick passes only probe what waits; a full one (deciding orphans) still runs every Interval.
		probeOnly = probeOnly && time.Since(lastFull) < interval
		if !probeOnly {
			lastFull = time.Now()
		}
		rep, err := c.passWith(ctx, 0, RunOptions{probeOnly: probeOnly})
		probeOnly = false
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			c.Log().Warn("cleanup pass failed", "err", err)
		case rep.Waiting > 0:
			next = orDefault(c.ProbeInterval, 100*time.Millisecond)
			probeOnly = true
		}
		if len(rep.Decided) > 0 || len(rep.Actions) > 0 {
			budget.Refill()
		}
		if d, err := c.Catalog.NextCleanupIn(ctx); err == nil && d >= 0 && d < next {
			next = max(d, 10*time.Millisecond)
		}
		switch c.wait(ctx, sub, next, budget) {
		case woken:
			probeOnly = false
		case stopped:
			return nil
		}
	}
}

// Notifications that turn out to be for nothing cost the cleaner at most wakeBurst passes at
// once, then one per wakeEvery (notifier.Budget): anyone who may connect to the catalog's
// database may send deckhand's notifications, and a pass is several catalog round trips. A
// pass that does something fills the budget again.
const (
	wakeBurst = 4
	wakeEvery = 200 * time.Millisecond
)

type wakeReason int

const (
	timedOut wakeReason = iota
	woken               // something may have ended, or notifications may have been missed
	stopped
)

// wait waits up to d for a notification that may end an operation, within the budget, or a
// resync. A notification beyond the budget waits for its turn, and those that come meanwhile
// merge into it; one still waiting when d is up makes that a wake-up.
func (c *Cleaner) wait(ctx context.Context, sub *notifier.Subscription, d time.Duration, budget *notifier.Budget) wakeReason {
	timer := time.NewTimer(d)
	defer timer.Stop()
	var later <-chan time.Time // the turn of a notification beyond the budget
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-timer.C:
			if later != nil {
				budget.Spend(time.Now())
				return woken
			}
			return timedOut
		case <-sub.Resync():
			return woken
		case <-later:
			budget.Spend(time.Now())
			return woken
		case n := <-sub.C():
			if n.Channel == catalog.ChannelJob {
				// Payload "<job id>:<state>": only an ending job can end operations.
				_, state, _ := strings.Cut(n.Payload, ":")
				if !deckhandtype.JobState(state).Terminal() {
					continue
				}
			}
			if later != nil {
				continue
			}
			wait := budget.Take(time.Now())
			if wait == 0 {
				return woken
			}
			later = time.After(wait)
		}
	}
}

// Retain deletes the operations that ended more than Retention before now, with their
// records, once every record has ended that long ago too. The engine's leader calls it on its
// clock (engine.Retainer).
func (c *Cleaner) Retain(ctx context.Context, now time.Time) error {
	cutoff := now.Add(-orDefault(c.Retention, 7*24*time.Hour))
	const batch = 500
	for ctx.Err() == nil {
		n, err := c.Catalog.DeleteEndedCleanup(ctx, cutoff, batch)
		if err != nil {
			return err
		}
		if n > 0 {
			c.Log().Info("deleted ended cleanup operations past retention", "operations", n)
		}
		if n < batch {
			return nil
		}
	}
	return nil
}

// probe returns the waiting records whose resource nothing holds any more: relations that no
// session locks, slots that no walsender uses. Other types wait for their backoff.
func (c *Cleaner) probe(ctx context.Context, waiting []catalog.WaitingRecord) []int64 {
	groups := map[nodeconn.Owner][]catalog.WaitingRecord{}
	for _, w := range waiting {
		switch w.Type {
		case deckhandtype.ResourceTable, deckhandtype.ResourceIndex, deckhandtype.ResourceReplicationSlot:
			k := nodeconn.Owner{Node: w.Node, DSN: w.NodeDSN, Role: w.Owner, Submitter: w.SubmittedBy}
			groups[k] = append(groups[k], w)
		}
	}
	var free []int64
	for o, recs := range groups {
		// A refused owner check leaves the records to their removal attempt, which fails them.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := c.Pools.OwnerConn(actx, o)
		cancel()
		if err != nil {
			continue
		}
		for _, w := range recs {
			var busy bool
			var err error
			if w.Type == deckhandtype.ResourceReplicationSlot {
				busy, err = slotActive(ctx, conn.Conn(), w.Name)
			} else {
				busy, err = RelationBusy(ctx, conn.Conn(), []string{pgx.Identifier{w.Location, w.Name}.Sanitize()})
			}
			if err != nil {
				c.Log().Debug("probe failed", "record", w.ID, "err", err)
				continue
			}
			if !busy {
				free = append(free, w.ID)
			}
		}
		nodeconn.Release(ctx, conn)
	}
	return free
}
