package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// DSN returns a keyword/value conninfo for this cluster.
func (c *Cluster) DSN(dbname, user string) string {
	return DSN(c.Host, c.Port, dbname, user)
}

// DSN returns a keyword/value conninfo for a server at host:port, without TLS: the clusters
// listen on the loopback interface only.
func DSN(host string, port int, dbname, user string) string {
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable",
		connValue(host), port, connValue(dbname), connValue(user))
}

// URL returns a URL conninfo for this cluster (postgres://user@host:port/dbname), without TLS,
// built from its parts: deckhand takes either form wherever it takes conninfo.
func (c *Cluster) URL(dbname, user string) string {
	u := url.URL{Scheme: "postgres", User: url.User(user), Host: c.Addr(), Path: "/" + dbname, RawQuery: "sslmode=disable"}
	return u.String()
}

// connValue quotes a conninfo value only when it needs it, so that ordinary DSNs stay readable.
func connValue(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\r\v\f'\\") {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Addr is the server's host:port.
func (c *Cluster) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// Connect opens a connection to dbname as the superuser.
func (c *Cluster) Connect(ctx context.Context, dbname string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.DSN(dbname, Superuser))
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connecting to %s on port %d: %w", dbname, c.Port, err)
	}
	return conn, nil
}

// Exec runs sql in dbname as the superuser: in database postgres on the cluster's admin pool
// (adminExec), elsewhere on a connection of its own. Without args the simple protocol is used,
// so sql may hold several statements.
func (c *Cluster) Exec(ctx context.Context, dbname, sql string, args ...any) error {
	if dbname == "postgres" {
		return c.adminExec(ctx, sql, args...)
	}
	conn, err := c.Connect(ctx, dbname)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("pgcluster: on port %d in %s: %w", c.Port, dbname, err)
	}
	return nil
}

// CreateDatabase creates database name, owned by the superuser.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return c.adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// CreateDatabaseFrom creates database name as a copy of database template, which no session
// may be connected to.
func (c *Cluster) CreateDatabaseFrom(ctx context.Context, name, template string) error {
	return c.adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
}

// DropDatabase drops name if it exists, disconnecting its sessions.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return c.adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// CreateRole creates role name. attrs is spliced into the statement unquoted (e.g. "LOGIN",
// "LOGIN CREATEDB"), so it must be a fixed string chosen by the caller, never input.
func (c *Cluster) CreateRole(ctx context.Context, name string, attrs string) error {
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize()
	if attrs = strings.TrimSpace(attrs); attrs != "" {
		sql += " WITH " + attrs
	}
	return c.adminExec(ctx, sql)
}

func (c *Cluster) queryLSN(ctx context.Context, conn *pgx.Conn, expr string) (deckhandtype.LSN, error) {
	var s *string
	if err := conn.QueryRow(ctx, "SELECT ("+expr+")::text").Scan(&s); err != nil {
		return 0, fmt.Errorf("pgcluster: %s on port %d: %w", expr, c.Port, err)
	}
	if s == nil {
		return 0, fmt.Errorf("pgcluster: %s is NULL on port %d (not a standby?)", expr, c.Port)
	}
	return deckhandtype.ParseLSN(*s)
}

func (c *Cluster) oneLSN(ctx context.Context, expr string) (deckhandtype.LSN, error) {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	return c.queryLSN(ctx, conn, expr)
}

// CurrentLSN returns a position on a primary that covers every transaction committed before
// the call. It first commits a transaction of its own with synchronous_commit on: with the
// harness default (off) recent commits may still sit in WAL buffers, the walsender only ships
// flushed WAL, and a standby waiting for an unflushed position would wait for the WAL writer.
// The transaction must write WAL, or PostgreSQL commits it asynchronously all the same; a
// transactional logical message does that without touching any table.
func (c *Cluster) CurrentLSN(ctx context.Context) (deckhandtype.LSN, error) {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on; SELECT pg_logical_emit_message(true, 'deckhand-pgcluster', 'flush')"); err != nil {
		return 0, fmt.Errorf("pgcluster: flushing WAL on port %d: %w", c.Port, err)
	}
	return c.queryLSN(ctx, conn, "pg_current_wal_flush_lsn()")
}

// ReplayLSN returns how far a standby has replayed.
func (c *Cluster) ReplayLSN(ctx context.Context) (deckhandtype.LSN, error) {
	return c.oneLSN(ctx, "pg_last_wal_replay_lsn()")
}

// ReceiveLSN returns how far a standby has received and flushed WAL, replayed or not.
func (c *Cluster) ReceiveLSN(ctx context.Context) (deckhandtype.LSN, error) {
	return c.oneLSN(ctx, "pg_last_wal_receive_lsn()")
}

// WaitReplayed waits until a standby has replayed lsn, so that everything committed on the
// primary before CurrentLSN returned it is visible on the standby.
func (c *Cluster) WaitReplayed(ctx context.Context, lsn deckhandtype.LSN) error {
	return c.waitLSN(ctx, "pg_last_wal_replay_lsn()", lsn)
}

// WaitReceived waits until a standby has received lsn (it may still be unreplayed, e.g. while
// replay is paused).
func (c *Cluster) WaitReceived(ctx context.Context, lsn deckhandtype.LSN) error {
	return c.waitLSN(ctx, "pg_last_wal_receive_lsn()", lsn)
}

func (c *Cluster) waitLSN(ctx context.Context, expr string, want deckhandtype.LSN) error {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		got, err := c.queryLSN(ctx, conn, expr)
		if err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting on port %d for %s to reach %s (at %s): %w", c.Port, expr, want, got, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// PauseReplay pauses WAL replay on a standby and returns once replay has actually stopped
// (PostgreSQL only requests the pause; a record or two may still be applied meanwhile).
// WAL keeps being received.
func (c *Cluster) PauseReplay(ctx context.Context) error {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		return fmt.Errorf("pgcluster: pausing replay on port %d: %w", c.Port, err)
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return fmt.Errorf("pgcluster: on port %d: %w", c.Port, err)
	}
	if version < 140000 {
		// Before 14 the pause cannot be observed; it takes effect before the next record.
		return nil
	}
	for {
		var state string
		if err := conn.QueryRow(ctx, "SELECT pg_get_wal_replay_pause_state()").Scan(&state); err != nil {
			return fmt.Errorf("pgcluster: pausing replay on port %d: %w", c.Port, err)
		}
		if state == "paused" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for replay to pause on port %d (state %q): %w", c.Port, state, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ResumeReplay undoes PauseReplay.
func (c *Cluster) ResumeReplay(ctx context.Context) error {
	return c.Exec(ctx, "postgres", "SELECT pg_wal_replay_resume()")
}

// IsStandby reports whether the server is in recovery.
func (c *Cluster) IsStandby(ctx context.Context) (bool, error) {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var b bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&b); err != nil {
		return false, fmt.Errorf("pgcluster: on port %d: %w", c.Port, err)
	}
	return b, nil
}
