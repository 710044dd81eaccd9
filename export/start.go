package export

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Start starts an export of a partition. It normalizes and checks the request, finds the
// group's primary and checks there that the submitter may act as the owner and that the
// partition is one an export reads (for a clear refusal: the workers check again on every node
// before anything runs). The catalog's
// deckhand.submit_export then decides where the submitter may write, and refuses a
// destination that already has an export unless req.Force.
func Start(ctx context.Context, c *engine.Client, req Request) (*deckhandtype.Export, error) {
	if err := req.Normalize(); err != nil {
		return nil, err
	}
	primary, err := groupPrimary(ctx, c, req.Group)
	if err != nil {
		return nil, err
	}
	submitter, err := c.Submitter(ctx)
	if err != nil {
		return nil, err
	}
	owner := req.Owner
	if owner == "" {
		owner = submitter
	}
	if err := c.CheckOwner(ctx, primary.Name, owner, submitter); err != nil {
		return nil, err
	}
	if err := checkPartition(ctx, primary, req, owner); err != nil {
		return nil, err
	}
	exportID, _, err := c.Catalog().CreateExport(ctx, req.Record(primary.Name, owner))
	if errors.Is(err, catalog.ErrExportExists) {
		return nil, spec.Invalidf("%v", err)
	}
	if err != nil {
		return nil, err
	}
	return c.Export(ctx, exportID)
}

// groupPrimary finds the primary of a node group, probing the members when the leader has not
// recorded their roles yet.
func groupPrimary(ctx context.Context, c *engine.Client, group string) (deckhandtype.Node, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return deckhandtype.Node{}, err
	}
	members, _ := deckhandtype.Primaries(nodes, group)
	if len(members) == 0 {
		return deckhandtype.Node{}, spec.Invalidf("node group %q has no nodes (see `deckhand node list`)", group)
	}
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	// A member the leader has not probed yet is asked now; one that does not answer counts
	// as a member whose probe failed, so that a dead member does not stop the export when
	// another is known to be the primary.
	var probeErr error
	for i, n := range members {
		if n.Role != "unknown" {
			continue
		}
		role, _, err := nodeconn.Probe(ctx, pools, n.DSN)
		if err != nil {
			msg := err.Error()
			members[i].LastError = &msg
			probeErr = errors.Join(probeErr, fmt.Errorf("node %s of group %s: %w", n.Name, group, err))
			continue
		}
		members[i].Role, members[i].LastError = role, nil
	}
	_, primaries := deckhandtype.Primaries(members, group)
	switch len(primaries) {
	case 0:
		if probeErr != nil {
			return deckhandtype.Node{}, probeErr
		}
		return deckhandtype.Node{}, spec.Invalidf("node group %q has no primary", group)
	case 1:
		return primaries[0], nil
	default:
		names := make([]string, len(primaries))
		for i, n := range primaries {
			names[i] = n.Name
			if n.LastError != nil {
				names[i] += " (not answering)"
			}
		}
		// Two nodes that reach one server (a host name and its address, registered before
		// node add refused that, or a name that follows the primary beside the promoted
		// standby's own) are a registration to fix, not two servers accepting writes.
		why := "a group is one primary and its standbys; if two of them are one server registered under two names, remove one (`deckhand node remove`)"
		dsns := make([]string, len(primaries))
		for i, n := range primaries {
			dsns[i] = n.DSN
		}
		if i, j, id, ok := nodeconn.SameServer(ctx, dsns); ok {
			why = fmt.Sprintf("%s and %s are one server (%s) registered under two names: remove one (`deckhand node remove %s`)",
				primaries[i].Name, primaries[j].Name, id, primaries[j].Name)
		}
		return deckhandtype.Node{}, spec.Invalidf("node group %q has %d primaries (%s): %s", group, len(primaries), strings.Join(names, ", "), why)
	}
}

// checkPartition refuses, before anything is written, a partition the primary does not have,
// that is not what an export reads (leafProblem) or that has a column export cannot write. It asks over the node's registered conninfo,
// as the owner check does; the coordinator checks again, as the owner, when it runs.
func checkPartition(ctx context.Context, primary deckhandtype.Node, req Request, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeconn.CheckTimeout)
	defer cancel()
	conn, err := nodeconn.ConnectToCheck(ctx, primary.DSN)
	if err != nil {
		return fmt.Errorf("check the partition on node %s: %w", primary.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	partition, err := qualifiedName(req.Partition)
	if err != nil {
		return spec.Invalidf("--partition: %v", err)
	}
	oid, kind, ok, err := lookupName(ctx, conn, partition)
	if err != nil {
		return fmt.Errorf("check the partition on node %s: %w", primary.Name, err)
	}
	if !ok {
		return spec.Invalidf("relation %s does not exist on node %s", req.Partition, primary.Name)
	}
	problem, err := leafProblem(ctx, conn, req.Table, req.Partition, oid, kind, primary.Name)
	if err != nil {
		return fmt.Errorf("check the partition on node %s: %w", primary.Name, err)
	}
	if problem != "" {
		return spec.Invalidf("%s", problem)
	}
	// The owner reads the partition and holds a SHARE lock on it for the export's duration;
	// PostgreSQL's own check (as the owner) comes again when the coordinator runs.
	var mayRead, mayLock bool
	if err := conn.QueryRow(ctx, ownerPrivilegesSQL, owner, oid).Scan(&mayRead, &mayLock); err != nil {
		return fmt.Errorf("check the partition on node %s: %w", primary.Name, err)
	}
	switch {
	case !mayRead:
		return spec.Invalidf("owner %s may not read %s on node %s: permission denied (it needs SELECT on it)", owner, req.Partition, primary.Name)
	case !mayLock:
		return spec.Invalidf("owner %s may not lock %s on node %s in SHARE mode: permission denied (it needs UPDATE, DELETE or TRUNCATE on it, or to own it)",
			owner, req.Partition, primary.Name)
	}
	// A column of a type export cannot write is refused now rather than by a failed job; the
	// coordinator checks again, under its lock.
	cols, err := parquetcopy.ColumnsOf(ctx, conn.PgConn(), oid)
	if err != nil {
		return fmt.Errorf("check the partition on node %s: %w", primary.Name, err)
	}
	if err := parquetcopy.CheckSupported(cols); err != nil {
		return spec.Invalidf("%s: %v", req.Partition, err)
	}
	return nil
}

// ownerPrivilegesSQL: may role $1 read relation $2, and lock it in SHARE mode (PostgreSQL asks
// UPDATE, DELETE or TRUNCATE for that; an owner has them all)?
const ownerPrivilegesSQL = `SELECT
	pg_catalog.has_table_privilege($1::pg_catalog.name, $2::pg_catalog.oid, 'SELECT'::pg_catalog.text),
	pg_catalog.has_table_privilege($1::pg_catalog.name, $2::pg_catalog.oid, 'UPDATE, DELETE, TRUNCATE'::pg_catalog.text)`
