package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// pgbenchSelect runs pgbench's built-in select-only script (-S) with 16 clients for d against
// database dsn, which it first fills (scale 1), and returns the transactions per second. It is
// what the server reaches with the simplest statements: the ceiling for SQL tasks. With a
// meter, it also returns the CPU a transaction cost in µs: the server's (its sessions end with
// pgbench, and are counted once the postmaster has waited for them) and pgbench's own.
func pgbenchSelect(ctx context.Context, dsn string, d time.Duration, meter *cpuMeter) (tps, cpuUS float64, err error) {
	bin, err := pgbenchPath()
	if err != nil {
		return 0, 0, err
	}
	env, err := libpqEnv(dsn)
	if err != nil {
		return 0, 0, err
	}
	var clientCPU time.Duration
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("pgbench %v: %w: %s", args, err, bytes.TrimSpace(out))
		}
		clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return out, nil
	}
	if _, err := run("-i", "-q", "-s", "1"); err != nil {
		return 0, 0, err
	}
	var before cpuSample
	if meter != nil {
		if before, err = meter.sample(ctx); err != nil {
			meter = nil
		}
	}
	out, err := run("-S", "-n", "-c", "16", "-j", "2", "-T", strconv.Itoa(int(d.Seconds())))
	if err != nil {
		return 0, 0, err
	}
	m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("pgbench printed no tps: %s", out)
	}
	if tps, err = strconv.ParseFloat(string(m[1]), 64); err != nil {
		return 0, 0, err
	}
	n := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`).FindSubmatch(out)
	if meter == nil || n == nil {
		return tps, 0, nil
	}
	txns, _ := strconv.Atoi(string(n[1]))
	after, err := meter.sessionsEnded(ctx, dbName(dsn))
	if err != nil {
		return tps, 0, nil
	}
	// The sessions of pgbench's database, which have ended, and the server's other processes;
	// not the bench's idle workers and their sessions.
	c := after.since(before)
	return tps, perTask(c.byDB[""]+c.byDB[dbName(dsn)]+clientCPU, txns), nil
}

// pgbenchPath finds pgbench beside the server binaries, or on the PATH.
func pgbenchPath() (string, error) {
	if dir, err := pgcluster.BinDir(); err == nil {
		if p := filepath.Join(dir, "pgbench"); fileExists(p) {
			return p, nil
		}
	}
	return exec.LookPath("pgbench")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// libpqEnv is dsn (either conninfo form, as pgx reads it) as libpq's environment variables:
// pgbench speaks libpq, which does not know pgx's own parameters.
func libpqEnv(dsn string) ([]string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgbench: %w", err)
	}
	sslmode := "disable"
	if cfg.TLSConfig != nil {
		sslmode = "prefer"
	}
	env := []string{"PGHOST=" + cfg.Host, "PGPORT=" + strconv.Itoa(int(cfg.Port)), "PGUSER=" + cfg.User,
		"PGDATABASE=" + cfg.Database, "PGSSLMODE=" + sslmode, "PGCONNECT_TIMEOUT=10", "PGAPPNAME=deckhand bench"}
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	return env, nil
}
