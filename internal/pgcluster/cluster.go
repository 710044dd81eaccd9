package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Superuser is the role initdb creates; every cluster trusts it from localhost.
const Superuser = "postgres"

const (
	dirPrefix = "deckhand-pg-"
	// Fast shutdown normally takes well under a second; the bound only matters when something
	// is wedged, and then SIGKILL is the right answer for a throwaway cluster.
	stopTimeout = 15 * time.Second
	// How many fresh ports Start tries when another process grabs the one it picked.
	portAttempts = 5
)

// Options tune a cluster.
type Options struct {
	// Settings are extra postgresql.conf settings; they override the harness defaults, except
	// for the address, port and socket directory, which the harness owns.
	Settings map[string]string
	// Durable keeps fsync, synchronous_commit and full_page_writes on. The default turns them
	// off: the clusters are thrown away, and fsync dominates test time on slow disks.
	Durable bool
	// PasswordAuth makes every role but the superuser log in with a password (scram-sha-256),
	// as in production, so that a test proves which role a connection really is (the test
	// harness gives the roles it makes a password and a line in a pgpass file).
	PasswordAuth bool
}

// Cluster is one running (or killed) postgres server with its own temporary directory.
// Host, Port, DataDir and Dir do not change after Start returns, so they may be read freely.
type Cluster struct {
	Host    string // always 127.0.0.1
	Port    int
	Dir     string // temporary root: data directory, unix socket, server log
	DataDir string
	LogFile string
	// Primary is the cluster a standby streams from; nil for a primary.
	Primary *Cluster

	opts Options
	user osUser
	bin  string

	mu      sync.Mutex
	proc    *process // nil when not running
	removed bool
	stopErr error

	adminMu sync.Mutex
	admin   *pgxpool.Pool // see adminExec
}

type process struct {
	pid    int
	exited chan struct{} // closed once the postmaster has been reaped
	err    error         // Wait's result; read only after exited is closed
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func (o Options) validate() error {
	for k, v := range o.Settings {
		if !settingName.MatchString(k) {
			return fmt.Errorf("pgcluster: invalid setting name %q", k)
		}
		// A newline would let a value smuggle in further settings.
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("pgcluster: setting %s: value contains a line break or NUL", k)
		}
	}
	return nil
}

// Start creates a fresh cluster with initdb and starts it on a free port of 127.0.0.1. It returns
// once the server accepts connections. The caller must Stop it (or call StopAll).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.startOnFreePort(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// StartStandby takes a base backup of c and starts it as a hot standby streaming from c, without
// a replication slot. The primary's Settings apply to the standby as well, overridden by
// opts.Settings: a hot standby refuses to start with a smaller max_connections (and a few
// others) than its primary.
func (c *Cluster) StartStandby(ctx context.Context, opts Options) (*Cluster, error) {
	merged := make(map[string]string, len(c.opts.Settings)+len(opts.Settings))
	for k, v := range c.opts.Settings {
		merged[k] = v
	}
	for k, v := range opts.Settings {
		merged[k] = v
	}
	opts.Settings = merged
	s, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	s.Primary = c
	cmd := s.user.command(ctx, s.Dir, filepath.Join(s.bin, "pg_basebackup"),
		"--host="+c.Host, "--port="+strconv.Itoa(c.Port), "--username="+Superuser, "--no-password",
		"--pgdata="+s.DataDir, "--write-recovery-conf", "--wal-method=stream",
		"--checkpoint=fast", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, errors.Join(fmt.Errorf("pgcluster: pg_basebackup from port %d: %w\n%s", c.Port, err, tail(out, 30)), s.Stop())
	}
	// The backup carries the primary's pg_hba.conf and include line; only the harness-owned
	// settings file differs, and startOnFreePort rewrites it.
	if err := s.startOnFreePort(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func newCluster(opts Options) (*Cluster, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	u, err := serverUser()
	if err != nil {
		return nil, err
	}
	sweepOnce.Do(sweepStale)
	tmp, err := filepath.Abs(os.TempDir())
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	dir, err := os.MkdirTemp(tmp, dirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c := &Cluster{
		Host:    "127.0.0.1",
		Dir:     dir,
		DataDir: filepath.Join(dir, "data"),
		LogFile: filepath.Join(dir, "postgres.log"),
		opts:    opts,
		user:    u,
		bin:     bin,
	}
	register(c)
	// The owner file lets a later process remove this directory if we die without cleaning up.
	err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
	if err == nil {
		err = u.chown(dir)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgcluster: %w", err), c.Stop())
	}
	return c, nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	cmd := c.user.command(ctx, c.Dir, filepath.Join(c.bin, "initdb"),
		"--pgdata="+c.DataDir, "--username="+Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, tail(out, 30))
	}
	if err := c.user.writeFile(filepath.Join(c.DataDir, "pg_hba.conf"), []byte(hbaConf(c.opts.PasswordAuth))); err != nil {
		return err
	}
	// Harness settings live in their own file so that a standby can replace them wholesale
	// after pg_basebackup copied the primary's.
	f, err := os.OpenFile(filepath.Join(c.DataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString("\ninclude = '" + confFile + "'\n")
	return errors.Join(err, f.Close())
}

// hbaConf trusts every connection from this machine, or with passwordAuth only the
// superuser's: every other role must give its password.
func hbaConf(passwordAuth bool) string {
	others := "trust"
	if passwordAuth {
		others = "scram-sha-256"
	}
	var b strings.Builder
	b.WriteString("# written by deckhand pgcluster\n")
	for _, db := range []string{"all", "replication"} {
		fmt.Fprintf(&b, "local %-11s %-9s              trust\n", db, Superuser)
		fmt.Fprintf(&b, "host  %-11s %-9s 127.0.0.1/32 trust\n", db, Superuser)
		fmt.Fprintf(&b, "host  %-11s %-9s ::1/128      trust\n", db, Superuser)
		fmt.Fprintf(&b, "local %-11s all                   %s\n", db, others)
		fmt.Fprintf(&b, "host  %-11s all       127.0.0.1/32 %s\n", db, others)
		fmt.Fprintf(&b, "host  %-11s all       ::1/128      %s\n", db, others)
	}
	return b.String()
}

const (
	confFile  = "deckhand.conf"
	ownerFile = "owner"
)

func (c *Cluster) writeConf() error {
	s := map[string]string{
		"max_connections":       "300",
		"wal_level":             "replica",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
		"hot_standby":           "on",
		// Standbys stream without slots, so the primary must keep enough WAL for one that lags
		// behind for a while (paused replay still receives, so this rarely matters).
		"wal_keep_size":     "256MB",
		"logging_collector": "off",
		"log_destination":   "stderr",
		"log_line_prefix":   "%m [%p] %q%u@%d ",
	}
	if !c.opts.Durable {
		s["fsync"] = "off"
		s["synchronous_commit"] = "off"
		s["full_page_writes"] = "off"
	}
	for k, v := range c.opts.Settings {
		s[k] = v
	}
	s["listen_addresses"] = c.Host
	s["port"] = strconv.Itoa(c.Port)
	s["unix_socket_directories"] = c.Dir
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by deckhand pgcluster; rewritten on every start\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(s[k], "'", "''"))
	}
	return c.user.writeFile(filepath.Join(c.DataDir, confFile), []byte(b.String()))
}

// startOnFreePort picks a port and starts the server, trying again with another port when the
// one picked was taken in the window between probing and the server binding it.
func (c *Cluster) startOnFreePort(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for range portAttempts {
		if c.Port, err = freePort(); err != nil {
			return err
		}
		if err = c.writeConf(); err != nil {
			return err
		}
		err = c.launchLocked(ctx)
		var se *startError
		if !errors.As(err, &se) || !se.portTaken {
			return err
		}
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type startError struct {
	err       error
	logTail   string
	portTaken bool
}

func (e *startError) Error() string {
	return fmt.Sprintf("%v\n--- tail of server log ---\n%s", e.err, e.logTail)
}

func (e *startError) Unwrap() error { return e.err }

func (c *Cluster) launchLocked(ctx context.Context) error {
	if c.removed {
		return errors.New("pgcluster: cluster already stopped")
	}
	if c.proc != nil {
		select {
		case <-c.proc.exited:
			c.proc = nil
		default:
			return errors.New("pgcluster: cluster already running")
		}
	}
	logf, err := os.OpenFile(c.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := c.user.command(nil, c.Dir, filepath.Join(c.bin, "postgres"), "-D", c.DataDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGQUIT is postgres' immediate shutdown: if this process dies without stopping the
	// cluster, the postmaster takes its children down. Its own process group keeps a terminal's
	// Ctrl-C away from it, so that `deckhand demo` decides how its clusters stop.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	cmd.SysProcAttr.Setpgid = true
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("pgcluster: starting postgres: %w", err)
	}
	p := &process{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	c.proc = p
	if err := c.waitReady(ctx, p); err != nil {
		c.killLocked()
		logText := c.readLog(logStart)
		return &startError{
			err:       fmt.Errorf("pgcluster: starting postgres in %s on port %d: %w", c.DataDir, c.Port, err),
			logTail:   tail([]byte(logText), 40),
			portTaken: errors.Is(err, errNotOurServer) || strings.Contains(logText, "Address already in use"),
		}
	}
	return nil
}

var errNotOurServer = errors.New("another server answered on our port")

func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	var lastErr error
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("postgres exited during startup: %v", p.err)
		default:
		}
		lastErr = c.probe(ctx)
		if lastErr == nil || errors.Is(lastErr, errNotOurServer) {
			return lastErr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres to accept connections: %w (last attempt: %v)", ctx.Err(), lastErr)
		case <-p.exited:
			return fmt.Errorf("postgres exited during startup: %v", p.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probe connects over TCP and checks the data directory: between freePort closing its socket
// and the postmaster binding, another test binary's server may have taken the port.
func (c *Cluster) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("postgres", Superuser))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return err
	}
	if filepath.Clean(dir) != filepath.Clean(c.DataDir) {
		return fmt.Errorf("%w (data directory %s)", errNotOurServer, dir)
	}
	return nil
}

func (c *Cluster) readLog(from int64) string {
	f, err := os.Open(c.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogFile, err)
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size()-from > max {
		from = st.Size() - max
	}
	_, _ = f.Seek(from, io.SeekStart)
	b, _ := io.ReadAll(f)
	return string(b)
}

// LogTail returns the last n lines of the server log, for failure messages.
func (c *Cluster) LogTail(n int) string {
	return tail([]byte(c.readLog(0)), n)
}

func tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
