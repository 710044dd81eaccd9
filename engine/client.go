// Package engine is deckhand's Go API: a Client submits, watches and controls jobs, and a
// Worker runs them. Both talk only to the catalog; see doc.go for the architecture.
package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/internal/conninfo"
	"github.com/deckhandhq/deckhand/spec"
)

// Client submits and controls jobs.
type Client struct {
	Catalog *catalog.Catalog
}

// Open connects a client to the catalog at dsn and checks its schema version.
func Open(ctx context.Context, dsn string) (*Client, error) {
	cat, err := catalog.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if err := cat.CheckSchema(ctx); err != nil {
		cat.Close()
		return nil, err
	}
	return &Client{Catalog: cat}, nil
}

// Close releases the client's connections.
func (c *Client) Close() { c.Catalog.Close() }

func invalid(format string, args ...any) error { return &spec.Error{Msg: fmt.Sprintf(format, args...)} }

// IsInvalid reports whether err is a problem with the user's input (exit code 2) rather
// than a failure of deckhand or the catalog.
func IsInvalid(err error) bool {
	var specErr *spec.Error
	return errors.As(err, &specErr) || errors.Is(err, catalog.ErrInvalid) || errors.Is(err, catalog.ErrForbidden)
}

// Submit validates a job and writes it to the catalog; workers start on it at once. Nothing
// is written when the spec is invalid, names an unknown node, or names an owner the
// submitter (the catalog session user) may not act as.
func (c *Client) Submit(ctx context.Context, job *spec.Job) (int64, error) {
	if err := job.Validate(); err != nil {
		return 0, err
	}
	var submitter, searchPath string
	err := c.Catalog.Pool.QueryRow(ctx, `SELECT session_user, current_setting('search_path')`).Scan(&submitter, &searchPath)
	if err != nil {
		return 0, fmt.Errorf("read submitter: %w", err)
	}
	if job.SearchPath != "" {
		searchPath = job.SearchPath
	}
	if err := c.authorize(ctx, job, submitter); err != nil {
		return 0, err
	}
	nj := catalog.NewJob{
		Description: job.Description,
		Kind:        job.Kind,
		SearchPath:  searchPath,
		Settings:    job.Settings,
	}
	if nj.Kind == "" {
		nj.Kind = job.Tasks[0].Kind
	}
	for _, i := range job.TopoOrder() {
		t := job.Tasks[i]
		owner := t.Owner
		if owner == "" {
			owner = submitter
		}
		nj.Tasks = append(nj.Tasks, catalog.NewTask{
			Name: t.Name, Kind: t.Kind, Node: t.Node, Owner: owner, SQL: t.SQL, Payload: t.Payload,
			InTransaction: t.InTransaction(), MaxAttempts: t.Attempts(), Timeout: t.TimeoutOrDefault(),
			DependsOn: t.DependsOn,
		})
	}
	return c.Catalog.InsertJob(ctx, nj)
}

// authorize checks that every node exists and that, on each node, the owner role exists and
// the submitter is a member of it. Workers check membership again when they run the task.
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
	nodes, err := c.Catalog.NodesByName(ctx, names)
	if err != nil {
		return err
	}
	type pair struct{ node, owner string }
	checked := map[pair]bool{}
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, conn := range conns {
			conn.Close(context.Background()) //nolint:errcheck
		}
	}()
	for _, t := range job.Tasks {
		if t.Node == "" {
			continue
		}
		node, ok := nodes[t.Node]
		if !ok {
			return invalid("task %q: unknown node %q (see `deckhand node list`)", t.Name, t.Node)
		}
		owner := t.Owner
		if owner == "" {
			owner = submitter
		}
		if checked[pair{t.Node, owner}] {
			continue
		}
		conn := conns[t.Node]
		if conn == nil {
			if conn, err = connectToCheck(ctx, node.DSN); err != nil {
				return fmt.Errorf("task %q: connect to node %s to check the owner: %w", t.Name, t.Node, err)
			}
			conns[t.Node] = conn
		}
		var ownerExists, submitterExists, member bool
		err := conn.QueryRow(ctx, checkOwnerSQL, submitter, owner).Scan(&ownerExists, &submitterExists, &member)
		if err != nil {
			return fmt.Errorf("task %q: check owner on node %s: %w", t.Name, t.Node, err)
		}
		switch {
		case !ownerExists:
			return invalid("task %q: owner role %q does not exist on node %s", t.Name, owner, t.Node)
		case !submitterExists:
			return invalid("task %q: submitter %q is not a role on node %s, so it cannot act as %q", t.Name, submitter, t.Node, owner)
		case !member:
			return invalid("task %q: submitter %q is not a member of role %q on node %s: permission denied", t.Name, submitter, owner, t.Node)
		}
		checked[pair{t.Node, owner}] = true
	}
	return nil
}

// checkOwnerSQL runs on a node as the node's registered user, where other roles may have
// created functions and operators: every name is pg_catalog's, with exact argument types.
const checkOwnerSQL = `
	SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $2::pg_catalog.name),
	       EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1::pg_catalog.name),
	       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1::pg_catalog.name)
	             AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $2::pg_catalog.name)
	            THEN pg_catalog.pg_has_role($1::pg_catalog.name, $2::pg_catalog.name, 'MEMBER'::pg_catalog.text) ELSE false END`

// connectToCheck connects to a node for the submission checks, with only pg_catalog on the
// search_path.
func connectToCheck(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("node conninfo cannot be parsed")
	}
	cfg.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// Run submits a one-task SQL job.
func (c *Client) Run(ctx context.Context, node, owner, sql string, inTransaction bool) (int64, error) {
	return c.Submit(ctx, &spec.Job{
		Description: "run on " + node,
		Tasks: []spec.Task{{
			Name: "sql", Kind: spec.KindSQL, Node: node, Owner: owner, SQL: sql, Transaction: &inTransaction,
		}},
	})
}

// Cancel cancels a job: tasks not yet started are cancelled at once, running ones have their
// backend cancelled on the node. It returns the job's state after the request.
func (c *Client) Cancel(ctx context.Context, id int64) (string, error) {
	return c.Catalog.CancelJob(ctx, id)
}

// Retry re-runs the failed, unscheduled and cancelled tasks of a failed or cancelled job.
func (c *Client) Retry(ctx context.Context, id int64) (string, error) {
	return c.Catalog.RetryJob(ctx, id)
}

// JobDetail is a job with its tasks and every attempt.
type JobDetail struct {
	catalog.Job
	Tasks    []catalog.Task    `json:"tasks"`
	Attempts []catalog.Attempt `json:"attempts"`
}

// Job reads a job with its tasks and attempts.
func (c *Client) Job(ctx context.Context, id int64) (*JobDetail, error) {
	job, err := c.Catalog.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	tasks, err := c.Catalog.Tasks(ctx, id)
	if err != nil {
		return nil, err
	}
	attempts, err := c.Catalog.Attempts(ctx, id)
	if err != nil {
		return nil, err
	}
	return &JobDetail{Job: job, Tasks: tasks, Attempts: attempts}, nil
}

// Wait blocks until the job ends or ctx is done, and returns the job as it ended. It wakes on
// the job's state-change notification; progress, when not nil, is called at most every
// 250 ms with the job's counters.
func (c *Client) Wait(ctx context.Context, id int64, progress func(catalog.Job)) (catalog.Job, error) {
	conn, err := c.Catalog.Pool.Acquire(ctx)
	if err != nil {
		return catalog.Job{}, err
	}
	defer func() {
		conn.Exec(context.Background(), "UNLISTEN *") //nolint:errcheck
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{catalog.ChannelJob}.Sanitize()); err != nil {
		return catalog.Job{}, err
	}
	key, err := c.Catalog.JobNotifyKey(ctx, id)
	if err != nil {
		return catalog.Job{}, err
	}
	prefix := key + ":"
	tick := time.Second // fallback poll, should a notification be missed
	if progress != nil {
		tick = 250 * time.Millisecond
	}
	for {
		job, err := c.Catalog.Job(ctx, id)
		if err != nil {
			return job, err
		}
		if progress != nil {
			progress(job)
		}
		if catalog.JobTerminal(job.State) {
			return job, nil
		}
		wctx, cancel := context.WithTimeout(ctx, tick)
		for {
			n, err := conn.Conn().WaitForNotification(wctx)
			if err != nil || strings.HasPrefix(n.Payload, prefix) {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return job, ctx.Err()
		}
	}
}

// AddNode registers a node. The conninfo must not contain a password: workers take
// credentials from their environment (pgpass, PGPASSWORD, certificates).
func (c *Client) AddNode(ctx context.Context, n catalog.Node) error {
	if n.MaxTasks <= 0 {
		n.MaxTasks = 4
	}
	if n.Group == "" {
		n.Group = n.Name
	}
	if !nodeNameRE.MatchString(n.Name) {
		return invalid("node %q: name must be 1-63 letters, digits, '_', '.' or '-'", n.Name)
	}
	if n.MaxTasks > 10000 {
		return invalid("node %q: --max-tasks %d is too large", n.Name, n.MaxTasks)
	}
	if err := checkConninfo(n.DSN); err != nil {
		return invalid("node %q: %v", n.Name, err)
	}
	return c.Catalog.AddNode(ctx, n)
}

// checkConninfo refuses conninfo that is malformed or carries a secret, in either form and
// any spelling (see conninfo.Check). Its errors never quote the conninfo.
func checkConninfo(dsn string) error { return conninfo.Check(dsn) }

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)
