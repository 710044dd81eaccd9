package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned when a named node or numbered job does not exist.
var ErrNotFound = errors.New("not found")

const nodeColumns = `name, dsn, node_group, max_tasks, role, replay_lsn::text AS replay_lsn, checked_at, last_error, created_at, running_tasks`

// AddNode registers a node, or updates it when it exists already (admins only: deckhand.node_add).
// An empty Group or a zero MaxTasks is kept as the registered node has it when it is updated,
// in the same statement, and takes its default (the node's name, 4) for a new node. added
// reports whether the node is new.
func (c *Catalog) AddNode(ctx context.Context, n deckhandtype.Node) (added bool, err error) {
	var group *string
	if n.Group != "" {
		group = &n.Group
	}
	var maxTasks *int
	if n.MaxTasks != 0 {
		maxTasks = &n.MaxTasks
	}
	err = c.Pool.QueryRow(ctx, `SELECT deckhand.node_add($1, $2, $3, $4)`, n.Name, n.DSN, group, maxTasks).Scan(&added)
	return added, callError(err)
}

// RemoveNode deletes a node (admins only). Runnable tasks bound to it are failed by the
// leader (ClaimStranded); a dead worker's task on it fails as its effect cannot be checked.
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

// GroupMembers returns the group node name is in once registered with group (an empty group:
// the one it is in now, or its name for a new node) and that group's other members, with
// their conninfo: what registering it must check, read by the group's index rather than from
// every node, so that registering a fleet node by node does not grow with its square.
func (c *Catalog) GroupMembers(ctx context.Context, name, group string) (string, []deckhandtype.Node, error) {
	rows, _ := c.Pool.Query(ctx, `WITH g AS (
			SELECT coalesce(nullif($2::text, ''), (SELECT n.node_group FROM deckhand.nodes n WHERE n.name = $1::text), $1::text) AS node_group)
		SELECT g.node_group, n.name, n.dsn FROM g
		LEFT JOIN deckhand.nodes n ON n.node_group = g.node_group AND n.name <> $1::text
		ORDER BY n.name`, name, group)
	var members []deckhandtype.Node
	var member, dsn *string
	_, err := pgx.ForEachRow(rows, []any{&group, &member, &dsn}, func() error {
		if member != nil {
			members = append(members, deckhandtype.Node{Name: *member, DSN: *dsn, Group: group})
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("read the members of node %s's group: %w", name, err)
	}
	return group, members, nil
}

// NodesToProbe lists every node's name, conninfo and latest probe error, by name: what the
// leader's probes need, without each node's count of running tasks (Nodes), which reads every
// running task every few seconds.
func (c *Catalog) NodesToProbe(ctx context.Context) ([]deckhandtype.Node, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT name, dsn, last_error FROM deckhand.node ORDER BY name`)
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByNameLax[deckhandtype.Node])
	if err != nil {
		return nil, fmt.Errorf("list nodes to probe: %w", err)
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

// RecordNodeCheck stores what a probe of a node learned, waiting for the node's row if a claim
// holds it.
func (c *Catalog) RecordNodeCheck(ctx context.Context, name, role, lsn string, checkErr error) error {
	return c.recordNodeCheck(ctx, NodeCheck{Name: name, Role: role, LSN: lsn, Err: checkErr}, 0)
}

// NodeCheck is what a probe of a node learned: its role and WAL position (empty when the
// probe failed), or why the probe failed.
type NodeCheck struct {
	Name, Role, LSN string
	Err             error
}

// nodeCheckLockWait bounds how long RecordNodeChecks waits for a node's row that a claim holds.
// Claims hold a node's row for a few milliseconds; a row held longer (a session left open in a
// transaction) leaves its node's check to the next round rather than holding up the rest.
const nodeCheckLockWait = 200 * time.Millisecond

// RecordNodeChecks stores the checks of a probing round, in one statement. That statement
// passes nodes that claims hold locked (waiting would keep claims off every node it has
// updated until it commits); they are then recorded one by one, each waiting for its row at
// most nodeCheckLockWait, and those still locked are left to the next round and returned. A
// batch the catalog refuses is recorded one by one too, so that no node's answer costs another
// its check.
func (c *Catalog) RecordNodeChecks(ctx context.Context, checks []NodeCheck) (skipped []string, err error) {
	names, roles, lsns, errs := make([]string, len(checks)), make([]*string, len(checks)), make([]*string, len(checks)), make([]*string, len(checks))
	for i, ch := range checks {
		names[i], roles[i], lsns[i], errs[i] = ch.Name, nonEmpty(ch.Role), nonEmpty(ch.LSN), checkMessage(ch.Err)
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
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("record checks of %d nodes: %w", len(checks), err)
	}
	var failed []error
	if err != nil {
		failed = append(failed, fmt.Errorf("record checks of %d nodes at once: %w", len(checks), err))
	}
	for _, ch := range checks {
		if slices.Contains(recorded, ch.Name) {
			continue
		}
		err := c.recordNodeCheck(ctx, ch, nodeCheckLockWait)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
			skipped = append(skipped, ch.Name)
		case err != nil:
			failed = append(failed, err)
		}
	}
	return skipped, errors.Join(failed...)
}

// recordNodeCheck stores one node's check, waiting for its row at most lockWait (0: as long as
// it takes).
func (c *Catalog) recordNodeCheck(ctx context.Context, ch NodeCheck, lockWait time.Duration) error {
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		if lockWait > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', $1, true)`, strconv.FormatInt(lockWait.Milliseconds(), 10)); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `
			UPDATE deckhand.node SET role = coalesce(@role, role), replay_lsn = coalesce(@lsn::pg_lsn, replay_lsn),
				checked_at = coalesce(@now, now()), last_error = deckhand.redact(@error)
			WHERE name = @name`,
			pgx.StrictNamedArgs{"name": ch.Name, "role": nonEmpty(ch.Role), "lsn": nonEmpty(ch.LSN), "error": checkMessage(ch.Err), "now": c.now()})
		return err
	})
	if err != nil {
		return fmt.Errorf("record check of node %s: %w", ch.Name, err)
	}
	return nil
}

// checkMessage is a failed check's message as the catalog can store it: whatever a node (or
// anything listening where its conninfo points) answered, as valid UTF-8 without NUL bytes.
func checkMessage(err error) *string {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(strings.ToValidUTF8(taskerr.ConnectMessage(err), "\uFFFD"), "\x00", "")
	return &msg
}

// NotifyRunnable wakes the workers, for example when a node became eligible for waiting tasks.
func (c *Catalog) NotifyRunnable(ctx context.Context) error {
	_, err := c.Pool.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelRunnable)
	return err
}
