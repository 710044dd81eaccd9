package engine

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// NodeCheckError is a submission's check that a node could not make: connecting to the node
// with its registered conninfo, or asking it about the owner roles, failed. It concerns the
// node (its conninfo, its server, its pg_hba.conf), not the catalog or the submitter's own
// connection to it.
type NodeCheckError struct {
	Node string // the first node, in task order, registered with that conninfo
	Err  error  // what the check met, with the task it was made for
}

func (e *NodeCheckError) Error() string { return e.Err.Error() }
func (e *NodeCheckError) Unwrap() error { return e.Err }

// checkParallelism bounds the nodes a submission checks at once.
const checkParallelism = 16

// ownerCheck is what a node says of an owner role and the submitter.
type ownerCheck struct{ ownerExists, submitterExists, member bool }

// authorize checks that every node exists and that, on each node, the owner role exists and
// the submitter is a member of it. Workers check membership again when they run the task.
// Nodes are checked once per server (nodes registered with the same conninfo are one
// server), several at a time, each over a connection closed once its owners are checked:
// a job over a thousand nodes neither waits for a thousand connections in turn nor holds
// them all open.
func (c *Client) authorize(ctx context.Context, job *spec.Job, submitter string) error {
	var names []string
	for _, t := range job.Tasks {
		if t.Node != "" {
			names = append(names, t.Node)
		}
	}
	if len(names) == 0 {
		return nil
	}
	nodes, err := c.cat.NodesByName(ctx, names)
	if err != nil {
		return err
	}
	owner := func(t spec.Task) string {
		if t.Owner == "" {
			return submitter
		}
		return t.Owner
	}
	// The owners to check on each server, and the first node (in task order) naming it.
	owners := map[string][]string{}
	firstNode := map[string]string{}
	seen := map[[2]string]bool{}
	for _, t := range job.Tasks {
		if t.Node == "" {
			continue
		}
		node, ok := nodes[t.Node]
		if !ok {
			return spec.Invalidf("%sunknown node %q (see `deckhand node list`)", taskPrefix(t), t.Node)
		}
		if _, ok := firstNode[node.DSN]; !ok {
			firstNode[node.DSN] = t.Node
		}
		if k := [2]string{node.DSN, owner(t)}; !seen[k] {
			seen[k] = true
			owners[node.DSN] = append(owners[node.DSN], owner(t))
		}
	}
	results := make(map[[2]string]ownerCheck, len(seen))
	failed := map[string]error{} // by server: could not connect or ask
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(checkParallelism)
	for dsn, roles := range owners {
		g.Go(func() error {
			checks, err := checkOwners(gctx, dsn, submitter, roles)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[dsn] = err
				return nil
			}
			for i, role := range roles {
				results[[2]string{dsn, role}] = checks[i]
			}
			return nil
		})
	}
	g.Wait() //nolint:errcheck // every error is kept in failed
	// Errors are reported for the first task, in the job's order, that they concern.
	for _, t := range job.Tasks {
		if t.Node == "" {
			continue
		}
		dsn, role := nodes[t.Node].DSN, owner(t)
		if err := failed[dsn]; err != nil {
			return &NodeCheckError{Node: firstNode[dsn],
				Err: fmt.Errorf("%scheck the owner on node %s: %w", taskPrefix(t), firstNode[dsn], err)}
		}
		switch r := results[[2]string{dsn, role}]; {
		case !r.ownerExists:
			return spec.Invalidf("%sowner role %q does not exist on node %s", taskPrefix(t), role, t.Node)
		case !r.submitterExists:
			return spec.Invalidf("%ssubmitter %q is not a role on node %s, so it cannot act as %q", taskPrefix(t), submitter, t.Node, role)
		case !r.member:
			return spec.Invalidf("%ssubmitter %q is not a member of role %q on node %s: permission denied", taskPrefix(t), submitter, role, t.Node)
		}
	}
	return nil
}

// taskPrefix names t at the start of a refusal of it; the check CheckOwner makes for a
// command of its own (a move, an export) is of no task the user wrote, and names none.
func taskPrefix(t spec.Task) string {
	if t.Name == "" {
		return ""
	}
	return fmt.Sprintf("task %q: ", t.Name)
}

// checkOwners asks the server at dsn about each role, over one connection.
func checkOwners(ctx context.Context, dsn, submitter string, roles []string) ([]ownerCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeconn.CheckTimeout)
	defer cancel()
	conn, err := nodeconn.ConnectToCheck(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background()) //nolint:errcheck
	out := make([]ownerCheck, len(roles))
	for i, role := range roles {
		if err := conn.QueryRow(ctx, checkOwnerSQL, submitter, role).Scan(&out[i].ownerExists, &out[i].submitterExists, &out[i].member); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkOwnerSQL runs on a node as the node's registered user, where other roles may have
// created functions and operators: every name is pg_catalog's, with exact argument types.
const checkOwnerSQL = `
	SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $2::pg_catalog.name),
	       EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1::pg_catalog.name),
	       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1::pg_catalog.name)
	             AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $2::pg_catalog.name)
	            THEN pg_catalog.pg_has_role($1::pg_catalog.name, $2::pg_catalog.name, 'MEMBER'::pg_catalog.text) ELSE false END`
