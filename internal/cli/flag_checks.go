package cli

import (
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/bench"
)

// The engine and the benchmarks replace a zero or negative setting with their default, which
// suits a Go caller leaving a field unset; on the command line such a value was typed, and is
// refused rather than silently replaced.

// atLeast1 refuses a count below 1.
func atLeast1(flag string, n int) error {
	if n < 1 {
		return Usage("%s must be at least 1, got %d", flag, n)
	}
	return nil
}

// notNegative refuses a negative count (0 skips what it counts).
func notNegative(flag string, n int) error {
	if n < 0 {
		return Usage("%s must not be negative, got %d", flag, n)
	}
	return nil
}

// positive refuses a duration that is not above 0.
func positive(flag string, d time.Duration) error {
	if d <= 0 {
		return Usage("%s must be positive, got %s", flag, d)
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkServe checks serve's flags.
func checkServe(cfg engine.Config, o httpOptions) error {
	if cfg.ProgressInterval == 0 {
		return Usage("--progress-interval must not be 0: give how often to read progress, or a negative duration for never")
	}
	if err := firstError(
		atLeast1("--concurrency", cfg.Concurrency),
		positive("--lease", cfg.LeaseTTL),
		positive("--poll-interval", cfg.PollInterval),
		positive("--maintenance-interval", cfg.MaintenanceInterval),
		positive("--shutdown-grace", cfg.ShutdownGrace),
		positive("--shutdown-record-timeout", cfg.ShutdownRecordTimeout),
		positive("--retry-backoff", cfg.Backoff.Base),
		positive("--retry-backoff-max", cfg.Backoff.Max),
		positive("--http-session-idle", o.sessionIdle),
		atLeast1("--http-max-sessions", o.maxSessions),
	); err != nil {
		return err
	}
	if cfg.Backoff.Max < cfg.Backoff.Base {
		return Usage("--retry-backoff-max (%s) must be at least --retry-backoff (%s)", cfg.Backoff.Max, cfg.Backoff.Base)
	}
	return nil
}

// checkBench checks bench's counts.
func checkBench(o bench.Options) error {
	return firstError(
		atLeast1("--tasks", o.Tasks),
		notNegative("--sql-tasks", o.SQLTasks),
		notNegative("--chain", o.Chain),
		notNegative("--finished", o.Finished),
		notNegative("--submit", o.Submit),
		atLeast1("--node-max-tasks", o.NodeMax),
		nonNegativeDuration("--pgbench", o.Pgbench),
	)
}

func nonNegativeDuration(flag string, d time.Duration) error {
	if d < 0 {
		return Usage("%s must not be negative, got %s", flag, d)
	}
	return nil
}
