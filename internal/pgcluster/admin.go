package pgcluster

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// adminExec runs sql in database postgres as the superuser, on a pool of the cluster's own:
// tests create and drop a database or two each, and roles, and a new session costs the server
// tens of milliseconds of CPU on a small machine. Without args the simple protocol is used, so
// sql may hold several statements; it must leave the session as it found it (no SET). The
// pool is opened on first use and dropped whenever the server stops or is killed (closeAdmin),
// so a restarted server gets fresh sessions; a session that died anyway (terminated by a test)
// is replaced once.
func (c *Cluster) adminExec(ctx context.Context, sql string, args ...any) error {
	for try := 0; ; try++ {
		p, err := c.adminPool(ctx)
		if err != nil {
			return err
		}
		_, err = p.Exec(ctx, sql, args...)
		if err != nil && try == 0 && pgconn.SafeToRetry(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pgcluster: on port %d in postgres: %w", c.Port, err)
		}
		return nil
	}
}

func (c *Cluster) adminPool(ctx context.Context) (*pgxpool.Pool, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin != nil {
		return c.admin, nil
	}
	cfg, err := pgxpool.ParseConfig(c.DSN("postgres", Superuser))
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connecting to postgres on port %d: %w", c.Port, err)
	}
	c.admin = p
	return p, nil
}

// closeAdmin drops the admin pool without waiting: the server is about to stop, and a
// statement still running there must not hold up the stop.
func (c *Cluster) closeAdmin() {
	c.adminMu.Lock()
	p := c.admin
	c.admin = nil
	c.adminMu.Unlock()
	if p != nil {
		go p.Close()
	}
}
