package cleanup

import (
	"context"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// RemoveLeftovers removes what earlier, failed attempts of task taskID left on the nodes
// (their operations' due records), trying again for up to wait while resources are in use or
// removals fail transiently (a dropped connection): a task kind calls it before it looks at
// the nodes, so that it never takes an earlier attempt's half-made objects for someone else's.
// Orphaned operations (a worker that died) are decided first. It fails, retryably, if
// something is left.
func (c *Cleaner) RemoveLeftovers(ctx context.Context, taskID int64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		left, err := c.removeLeftovers(ctx, taskID)
		if err == nil && left == "" {
			return nil
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("an earlier attempt's %s is not removed yet", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
		}
	}
}

// removeLeftovers is one pass of RemoveLeftovers; it describes one resource left, if any.
func (c *Cleaner) removeLeftovers(ctx context.Context, taskID int64) (string, error) {
	if _, err := c.Catalog.DecideOperations(ctx); err != nil {
		return "", err
	}
	ids, err := c.Catalog.LeftoverOperationsOfTask(ctx, taskID)
	if err != nil {
		return "", err
	}
	for _, id := range ids {
		rep, err := c.pass(ctx, id, 0)
		if err != nil {
			return "", err
		}
		for _, a := range rep.Actions {
			if a.Outcome != deckhandtype.CleanupRemoved && a.Outcome != deckhandtype.CleanupForgotten {
				return fmt.Sprintf("%s %s (%s: %s)", a.Resource.Type, a.Resource.Display(), a.Outcome, a.Error), nil
			}
		}
		if rep.Waiting > 0 {
			return fmt.Sprintf("%d resources, in use,", rep.Waiting), nil
		}
	}
	return "", nil
}
