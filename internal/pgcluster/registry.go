package pgcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Every cluster this process creates is registered until stopped, so that one call at exit
// (Main in tests, a signal handler in `deckhand demo`) can remove them all.
var registry struct {
	mu       sync.Mutex
	clusters []*Cluster
}

func register(c *Cluster) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.clusters = append(registry.clusters, c)
}

func unregister(c *Cluster) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for i, x := range registry.clusters {
		if x == c {
			registry.clusters = append(registry.clusters[:i], registry.clusters[i+1:]...)
			return
		}
	}
}

// StopAll stops every cluster this process started and has not stopped yet, newest first so
// that standbys go before their primaries.
func StopAll() error {
	registry.mu.Lock()
	cs := append([]*Cluster(nil), registry.clusters...)
	registry.mu.Unlock()
	var errs []error
	for i := len(cs) - 1; i >= 0; i-- {
		errs = append(errs, cs[i].Stop())
	}
	return errors.Join(errs...)
}

var sweepOnce sync.Once

// sweepStale removes directories left by processes that died before cleaning up (a panic
// outside a test, SIGKILL, a timeout). Pdeathsig already took their servers down; only the
// files remain. A directory is touched only when both its owner and its postmaster are gone.
func sweepStale() {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		if pidAlive(readPid(filepath.Join(dir, ownerFile))) {
			continue
		}
		if pidAlive(readPid(filepath.Join(dir, "data", "postmaster.pid"))) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// readPid reads the first line of a pid file; -1 when missing or unreadable, which pidAlive
// counts as alive for the owner file (a directory still being created has none yet).
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && filepath.Base(path) == "postmaster.pid" {
		return 0
	}
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return -1
	}
	return pid
}

func pidAlive(pid int) bool {
	switch {
	case pid == 0:
		return false
	case pid < 0:
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
