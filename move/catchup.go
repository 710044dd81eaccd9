package move

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// catchUp starts applying the slot's changes on the target, with the applied position kept on
// the target (in the move's scratch schema) and in the catalog. waitFor waits until the
// target has applied up to a position, or the applier failed; stop ends the applier.
func (mv *move) catchUp(ctx context.Context, repl *pgconn.PgConn, start pglogrepl.LSN) (
	waitFor func(context.Context, pglogrepl.LSN) error, stop func(), err error) {
	c := mv.Cleaner
	scratch := pgx.Identifier{mv.name, "progress"}
	if !mv.scratchKept {
		if _, err := mv.op.Register(ctx, cleanup.SchemaCascade(mv.dst.node.Name, mv.name), cleanup.Always); err != nil {
			return nil, nil, err
		}
	}
	if err := mv.hold(ctx, cleanup.SchemaCascade(mv.dst.node.Name, mv.name)); err != nil {
		return nil, nil, err
	}
	if err := logicalapply.EnsureProgressTable(ctx, mv.dstConn, scratch); err != nil {
		return nil, nil, err
	}
	applyConn, releaseApply, err := mv.session(mv.dst.owner)(ctx)
	if err != nil {
		return nil, nil, err
	}
	applier := logicalapply.New(logicalapply.Config{
		Source: repl, Slot: mv.name, Publication: mv.name, Target: applyConn, ProgressTable: scratch,
		Applied: func(ctx context.Context, lsn pglogrepl.LSN) error {
			return c.Catalog.RecordMoveApplied(ctx, mv.t.ID, lsn.String())
		},
		Logger: c.Log(),
	})
	actx, cancel := context.WithCancel(ctx)
	applied := make(chan error, 1)
	go func() { applied <- mv.apply(actx, applier, releaseApply, start) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-applied
		})
	}
	var runErr error
	var runDone bool
	waitFor = func(ctx context.Context, lsn pglogrepl.LSN) error {
		if runDone {
			return runErr
		}
		done := make(chan error, 1)
		go func() { done <- applier.WaitApplied(ctx, lsn) }()
		select {
		case err := <-done:
			return err
		case err := <-applied:
			applied <- err // for stop
			if err == nil {
				err = errors.New("the applier stopped")
			}
			runDone, runErr = true, fmt.Errorf("catch-up: %w", err)
			return runErr
		}
	}
	if err := mv.at(ctx, StepCatchUp); err != nil {
		stop()
		return nil, nil, err
	}
	return waitFor, stop, nil
}

// maxApplyRuns bounds the runs of the applier in one attempt: each lost connection costs one.
const maxApplyRuns = 10

// apply runs the applier until ctx ends, and after a lost connection (source or target)
// resumes with new ones from the position the target itself recorded, exactly once: a blip
// during a long catch-up costs neither the copy nor the attempt. It returns the applier's
// error when that is permanent (a change the target refuses) or after maxApplyRuns runs.
func (mv *move) apply(ctx context.Context, a *logicalapply.Applier, release func(), start pglogrepl.LSN) error {
	var own *pgconn.PgConn // a replication connection of a resumed run (the first is the attempt's)
	defer func() {
		release()
		if own != nil {
			own.Close(context.Background()) //nolint:errcheck
		}
	}()
	backoff := 100 * time.Millisecond
	for run := 1; ; run++ {
		err := a.Run(ctx, start)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !resumable(err) || run >= maxApplyRuns {
			return err
		}
		mv.Cleaner.Log().Warn("move: the catch-up lost a connection; resuming where the target stands", "job", mv.t.JobID, "run", run, "err", err)
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 5*time.Second)
		newRepl, err := replicationConn(ctx, mv.src.owner, mv.t)
		if err != nil {
			continue // counts as a run: Run fails at once on the closed connections
		}
		newTarget, newRelease, err := mv.session(mv.dst.owner)(ctx)
		if err != nil {
			newRepl.Close(context.Background()) //nolint:errcheck
			continue
		}
		if own != nil {
			own.Close(context.Background()) //nolint:errcheck
		}
		release()
		own, release = newRepl, newRelease
		a.Use(newRepl, newTarget)
	}
}

// resumable reports whether a run of the applier that ended with err is worth another with new
// connections: not when the target refused a change (an ApplyError, permanent), yes for a lost
// connection, and for a slot still held by the walsender of a connection just lost (55006),
// which exits soon.
func resumable(err error) bool {
	var applyErr *logicalapply.ApplyError
	if errors.As(err, &applyErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" {
		return true
	}
	return taskerr.Retryable(err)
}
