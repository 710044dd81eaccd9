package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deckhandhq/deckhand/internal/procstat"
)

// Stop shuts the server down (fast shutdown, SIGKILL if that takes too long) and removes its
// directory. Calling it again returns the first call's result.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return c.stopErr
	}
	c.removed = true
	err := c.shutdownLocked()
	if rmErr := os.RemoveAll(c.Dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("pgcluster: %w", rmErr))
	}
	unregister(c)
	c.stopErr = err
	return err
}

func (c *Cluster) shutdownLocked() error {
	c.closeAdmin()
	p := c.proc
	if p == nil {
		return nil
	}
	select {
	case <-p.exited:
		// Signalling a reaped pid could hit an unrelated process that reused it.
		c.proc = nil
		return nil
	default:
	}
	_ = syscall.Kill(p.pid, syscall.SIGINT)
	select {
	case <-p.exited:
		c.proc = nil
		return nil
	case <-time.After(stopTimeout):
		c.killLocked()
		return fmt.Errorf("pgcluster: postgres on port %d ignored fast shutdown for %v and was killed", c.Port, stopTimeout)
	}
}

// Shutdown stops the server as Stop does (fast shutdown) but keeps its files: Restart starts it
// again, on the same port, as an operator's restart in two steps would.
func (c *Cluster) Shutdown() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shutdownLocked()
}

// Kill crashes the server: SIGKILL to the postmaster and all its children at once, as a crash
// of the machine would. The files stay, so Restart goes through crash recovery. Without
// Options.Durable, commits from the last moments before the kill may be lost, as
// synchronous_commit is off.
func (c *Cluster) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killLocked()
}

func (c *Cluster) killLocked() {
	c.closeAdmin()
	p := c.proc
	if p == nil {
		return
	}
	// Backends make themselves session leaders, so no process group holds them all; they are
	// found as the postmaster's children, with the postmaster stopped so that it cannot fork
	// more meanwhile. Once it is gone they would be reparented and no longer identifiable.
	var kids []int
	select {
	case <-p.exited:
	default:
		_ = syscall.Kill(p.pid, syscall.SIGSTOP)
		kids = childPids(p.pid)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	<-p.exited
	c.proc = nil
	// The children are not ours to wait for, and a new postmaster refuses to start while one of
	// them still holds the old shared memory (Restart retries in that case too).
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && anyAlive(kids) {
		time.Sleep(5 * time.Millisecond)
	}
}

func childPids(parent int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ok := procstat.Of(pid); ok && s.Parent == parent {
			kids = append(kids, pid)
		}
	}
	return kids
}

// anyAlive ignores zombies: they hold no shared memory, and whether anyone reaps them is up to
// whatever init the machine runs.
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if s, ok := procstat.Of(pid); ok && s.State != "Z" {
			return true
		}
	}
	return false
}

// Restart stops the server if it runs (fast shutdown) and starts it again on the same port. After
// Kill this is crash recovery.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.shutdownLocked(); err != nil {
		return err
	}
	if err := c.writeConf(); err != nil {
		return err
	}
	for {
		err := c.launchLocked(ctx)
		var se *startError
		// Leftovers of a crash (shared memory still attached by a dying backend) go away by
		// themselves; anything else is a real failure.
		if err == nil || !errors.As(err, &se) || !strings.Contains(se.logTail, "pre-existing shared memory block") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Running reports whether the postmaster process is alive.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return false
	}
	select {
	case <-c.proc.exited:
		return false
	default:
		return true
	}
}

// ResetWAL runs pg_resetwal with args on the data directory of a server that is shut down
// (Shutdown), as the server's user, so that a test can set what its control data says (-u:
// the oldest transaction whose commit status it keeps, -x: the next transaction id). Restart
// starts it again.
func (c *Cluster) ResetWAL(ctx context.Context, args ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return fmt.Errorf("pgcluster: pg_resetwal on port %d: the server runs", c.Port)
	}
	args = append(args, "-D", c.DataDir)
	if out, err := c.user.command(ctx, c.Dir, filepath.Join(c.bin, "pg_resetwal"), args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: pg_resetwal %s: %w\n%s", strings.Join(args, " "), err, tail(out, 30))
	}
	return nil
}
