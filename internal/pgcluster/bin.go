// Package pgcluster starts throwaway PostgreSQL clusters from the installed server binaries:
// primaries, hot standbys streaming from them, crash and restart, and the WAL positions that
// tell when a standby has caught up. `deckhand demo` and `deckhand bench` run on such clusters,
// so this package is linked into the deckhand binary and must never import package testing;
// the test harness built on it is package pgtest.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvBinDir names the environment variable that overrides where the server binaries are found.
const EnvBinDir = "DECKHAND_PG_BIN"

// BinDir returns the directory holding initdb, postgres and pg_basebackup: $DECKHAND_PG_BIN if set,
// else what `pg_config --bindir` says, else the newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("pgcluster: %s=%s: %w", EnvBinDir, dir, err)
		}
		return dir, nil
	}
	return discoveredBinDir()
}

// The discovery execs pg_config, so it is done once per process; the env override is read every
// time because it is cheap and tests may set it.
var discoveredBinDir = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		// Debian's libpq-dev pg_config may name a client-only directory, hence the check.
		if dir := strings.TrimSpace(string(out)); checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(matches[j])), filepath.Base(filepath.Dir(matches[i])))
	})
	for _, dir := range matches {
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pgcluster: no PostgreSQL server binaries found (tried pg_config --bindir and /usr/lib/postgresql/*/bin); set %s", EnvBinDir)
})

func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "postgres", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// versionLess orders "9.6" before "15" numerically, which a string sort would not.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errx := strconv.Atoi(as[i])
		y, erry := strconv.Atoi(bs[i])
		if errx != nil || erry != nil {
			return as[i] < bs[i]
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// osUser is who the server processes run as. PostgreSQL refuses to run as root, so under root
// they run as the "postgres" OS user and every file they touch must be chowned to it.
type osUser struct {
	uid, gid int
	switched bool // false: run as ourselves, chown nothing
}

var serverUser = sync.OnceValues(func() (osUser, error) {
	if os.Geteuid() != 0 {
		return osUser{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return osUser{}, fmt.Errorf("pgcluster: running as root, so the server must run as OS user postgres: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return osUser{}, fmt.Errorf("pgcluster: OS user postgres: %w", err)
	}
	return osUser{uid: uid, gid: gid, switched: true}, nil
})

func (u osUser) chown(path string) error {
	if !u.switched {
		return nil
	}
	if err := os.Chown(path, u.uid, u.gid); err != nil {
		return fmt.Errorf("pgcluster: chown %s to postgres: %w", path, err)
	}
	return nil
}

// writeFile writes a file the server must be able to read.
func (u osUser) writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return u.chown(path)
}

// command builds a child process running as the server user in dir. Inherited PG* variables
// are dropped because libpq-based tools (pg_basebackup) would otherwise pick up the caller's
// PGHOST, PGSSLMODE, PGOPTIONS and so on.
func (u osUser) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.Command(name, args...)
	}
	// The binaries resolve their own path relative to the working directory, which must be
	// readable by the postgres user; root's working directory usually is not.
	cmd.Dir = dir
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || (u.switched && strings.HasPrefix(kv, "HOME=")) {
			continue
		}
		env = append(env, kv)
	}
	if u.switched {
		env = append(env, "HOME="+dir)
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if u.switched {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}
	}
	return cmd
}
