package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// ErrNotFound is returned when a named node or numbered job does not exist.
var ErrNotFound = errors.New("not found")

const nodeColumns = `name, dsn, node_group, max_tasks, role, replay_lsn::text AS replay_lsn, checked_at, last_error, created_at, running_tasks`

// AddNode registers a node, or updates it when it exists already (admins only: deckhand.node_add).
func (c *Catalog) AddNode(ctx context.Context, n deckhandtype.Node) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.node_add($1, $2, $3, $4)`, n.Name, n.DSN, n.Group, n.MaxTasks)
	return callError(err)
}

// RemoveNode deletes a node (admins only). Tasks that still target it fail when they are claimed.
func (c *Catalog) RemoveNode(ctx context.Context, name string) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.node_remove($1)`, name)
	return callError(err)
}

// Nodes lists every node, by name.
func (c *Catalog) Nodes(ctx context.Context) ([]deckhandtype.Node, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+nodeColumns+` FROM deckhand.nodes ORDER BY name`)
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Node])
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodesByName returns the named nodes that exist, keyed by name.
func (c *Catalog) NodesByName(ctx context.Context, names []string) (map[string]deckhandtype.Node, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+nodeColumns+` FROM deckhand.nodes WHERE name = ANY($1)`, names)
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Node])
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	out := make(map[string]deckhandtype.Node, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n
	}
	return out, nil
}

// RecordNodeCheck stores what the leader learned when it last probed a node.
func (c *Catalog) RecordNodeCheck(ctx context.Context, name, role, lsn string, checkErr error) error {
	var errText *string
	if checkErr != nil {
		s := checkErr.Error()
		errText = &s
	}
	var lsnArg, roleArg *string
	if lsn != "" {
		lsnArg = &lsn
	}
	if role != "" {
		roleArg = &role
	}
	_, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.node SET role = coalesce(@role, role), replay_lsn = coalesce(@lsn::pg_lsn, replay_lsn),
			checked_at = coalesce(@now, now()), last_error = deckhand.redact(@error)
		WHERE name = @name`,
		pgx.StrictNamedArgs{"name": name, "role": roleArg, "lsn": lsnArg, "error": errText, "now": c.now()})
	if err != nil {
		return fmt.Errorf("record check of node %s: %w", name, err)
	}
	return nil
}

// NodeCheck is what a probe of a node learned: its role and WAL position (empty when the
// probe failed), or why the probe failed.
type NodeCheck struct {
	Name, Role, LSN string
	Err             error
}

// RecordNodeChecks stores the checks of a probing round in one statement, each node's as
// RecordNodeCheck would. A node that a claim holds locked is passed rather than waited for:
// the statement holds the rows it updated until it commits, and a wait would keep claims off
// all of them. It returns the checks it passed, for RecordNodeCheck to store one by one.
func (c *Catalog) RecordNodeChecks(ctx context.Context, checks []NodeCheck) (passed []NodeCheck, err error) {
	names, roles, lsns, errs := make([]string, len(checks)), make([]*string, len(checks)), make([]*string, len(checks)), make([]*string, len(checks))
	for i, ch := range checks {
		names[i] = ch.Name
		if ch.Role != "" {
			roles[i] = &ch.Role
		}
		if ch.LSN != "" {
			lsns[i] = &ch.LSN
		}
		if ch.Err != nil {
			msg := ch.Err.Error()
			errs[i] = &msg
		}
	}
	rows, _ := c.Pool.Query(ctx, `
		UPDATE deckhand.node n SET role = coalesce(ch.role, n.role), replay_lsn = coalesce(ch.lsn::pg_lsn, n.replay_lsn),
			checked_at = coalesce(@now, now()), last_error = deckhand.redact(ch.error)
		FROM unnest(@names::text[], @roles::text[], @lsns::text[], @errors::text[]) AS ch(name, role, lsn, error)
		WHERE n.name = ch.name
		  AND n.name IN (SELECT f.name FROM deckhand.node f WHERE f.name = ANY (@names::text[]) FOR UPDATE SKIP LOCKED)
		RETURNING n.name`,
		pgx.StrictNamedArgs{"names": names, "roles": roles, "lsns": lsns, "errors": errs, "now": c.now()})
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("record checks of %d nodes: %w", len(checks), err)
	}
	for _, ch := range checks {
		if !slices.Contains(recorded, ch.Name) {
			passed = append(passed, ch)
		}
	}
	return passed, nil
}

// NotifyRunnable wakes the workers, for example when a node became eligible for waiting tasks.
func (c *Catalog) NotifyRunnable(ctx context.Context) error {
	_, err := c.Pool.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelRunnable)
	return err
}
