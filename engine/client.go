package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Client submits, controls and reads jobs, as the catalog role it connected as.
type Client struct {
	cat   *catalog.Catalog
	kinds registry // what Submit accepts besides sql and noop: the features' kinds
}

// Catalog is the client's catalog handle. Programs pass it to NewWorker to run a worker (its
// type is internal to deckhand: the handle is all they need of it); deckhand's own feature
// packages and tools use it directly. Everything else goes through the Client's methods.
func (c *Client) Catalog() *catalog.Catalog { return c.cat }

// Open connects a client to the catalog at dsn and checks its schema version.
func Open(ctx context.Context, dsn string, features ...Feature) (*Client, error) {
	cat, err := catalog.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return NewClient(ctx, cat, features...)
}

// NewClient is a client on an open catalog handle, whose schema version it checks; it closes
// the handle when the check fails. deckhand's command line opens the handle itself, with
// each round trip bounded.
func NewClient(ctx context.Context, cat *catalog.Catalog, features ...Feature) (*Client, error) {
	if err := cat.CheckSchema(ctx); err != nil {
		cat.Close()
		return nil, cat.NoAnswer(err)
	}
	return &Client{cat: cat, kinds: newRegistry(features)}, nil
}

// As is a client with c's features on another catalog handle, connected as another role
// (deckhand's HTTP API opens one per signed-in role).
func (c *Client) As(cat *catalog.Catalog) *Client { return &Client{cat: cat, kinds: c.kinds} }

// Submitter is the catalog role this client acts as: the submitter of what it submits.
func (c *Client) Submitter(ctx context.Context) (string, error) {
	var role string
	if err := c.cat.Pool.QueryRow(ctx, `SELECT session_user`).Scan(&role); err != nil {
		return "", fmt.Errorf("read the catalog role: %w", err)
	}
	return role, nil
}

// CheckOwner checks on node, as Submit does for every task, that owner exists there and that
// submitter is a member of it. Feature packages call it before submitting work of their own.
func (c *Client) CheckOwner(ctx context.Context, node, owner, submitter string) error {
	check := &spec.Job{Tasks: []spec.Task{{Kind: spec.KindSQL, Node: node, Owner: owner, SQL: "-"}}}
	return c.authorize(ctx, check, submitter)
}

// Close releases the client's connections.
func (c *Client) Close() { c.cat.Close() }

// IsInvalid reports whether err is a problem with the user's input (exit code 2) rather
// than a failure of deckhand or the catalog.
func IsInvalid(err error) bool {
	var specErr *spec.Error
	return errors.As(err, &specErr) || errors.Is(err, catalog.ErrInvalid) || errors.Is(err, catalog.ErrForbidden)
}

// ErrDuplicateKey marks a submission or retry refused because an unfinished job of the same
// submitter holds its key; the error is a *DuplicateKeyError, which names that job.
var ErrDuplicateKey = catalog.ErrDuplicateKey

// DuplicateKeyError is the refusal of a job whose key an unfinished job holds: JobID is that
// job (0 when the caller may not see it).
type DuplicateKeyError = catalog.DuplicateKeyError

// Submit validates a job and writes it to the catalog; workers start on it at once. Nothing
// is written when the spec is invalid, names an unknown node, names an owner the submitter
// (the catalog session user) may not act as, or fails its kinds' Check. A job whose key an unfinished job of
// the submitter holds is refused with a *DuplicateKeyError.
func (c *Client) Submit(ctx context.Context, job *spec.Job) (int64, error) {
	var submitter, searchPath string
	err := c.cat.Pool.QueryRow(ctx, `SELECT session_user, `+catalog.CallerSearchPathSQL).Scan(&submitter, &searchPath)
	if err != nil {
		return 0, fmt.Errorf("read submitter: %w", err)
	}
	nj, err := c.Prepare(ctx, job, submitter, searchPath)
	if err != nil {
		return 0, err
	}
	return c.cat.InsertJob(ctx, nj)
}

// Prepare makes the checks Submit makes of a job for submitter — the spec is valid for this
// client's kinds, every node exists, on each node every owner exists and submitter is a
// member of it, and each kind's own Check passes — and returns the job ready to be written: tasks in dependency order, owners
// filled in with submitter, the search_path (searchPath when the job names none) and the
// kind. A schedule's firing calls it for the schedule's submitter.
func (c *Client) Prepare(ctx context.Context, job *spec.Job, submitter, searchPath string) (catalog.NewJob, error) {
	if err := job.Validate(c.kinds.submittable()); err != nil {
		return catalog.NewJob{}, err
	}
	if job.SearchPath != "" {
		searchPath = job.SearchPath
	}
	if err := c.authorize(ctx, job, submitter); err != nil {
		return catalog.NewJob{}, err
	}
	if err := c.kinds.check(ctx, c, submitter, job.Tasks); err != nil {
		return catalog.NewJob{}, err
	}
	nj := catalog.NewJob{
		Description: job.Description,
		Kind:        job.Kind,
		SearchPath:  searchPath,
		Settings:    job.Settings,
		Key:         job.Key,
		Priority:    job.Priority,
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
	return nj, nil
}

// Run submits a one-task SQL job.
func (c *Client) Run(ctx context.Context, node, owner, sql string, inTransaction bool) (int64, error) {
	return c.Submit(ctx, RunSpec(node, owner, sql, inTransaction))
}

// RunSpec is the spec of the one-task SQL job that Run submits, for callers that set more of
// it (a key, a priority) before submitting it.
func RunSpec(node, owner, sql string, inTransaction bool) *spec.Job {
	return &spec.Job{
		Description: "run on " + node,
		Tasks: []spec.Task{{
			Name: "sql", Kind: spec.KindSQL, Node: node, Owner: owner, SQL: sql, Transaction: &inTransaction,
		}},
	}
}

// Cancel cancels a job: tasks not yet started are cancelled at once, running ones have their
// backend cancelled on the node. It returns the job's state after the request.
func (c *Client) Cancel(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	return c.cat.CancelJob(ctx, id)
}

// Pause stops new claims of a job's tasks; its running tasks finish, or with now are
// cancelled on their nodes and released without charging an attempt. The job is pausing
// while tasks of it still run, then paused. It returns the job's state after the request.
func (c *Client) Pause(ctx context.Context, id int64, now bool) (deckhandtype.JobState, error) {
	return c.cat.PauseJob(ctx, id, now)
}

// Resume makes a paused or pausing job's tasks claimable again.
func (c *Client) Resume(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	return c.cat.ResumeJob(ctx, id)
}

// Retry re-runs the failed, unscheduled and cancelled tasks of a failed or cancelled job.
func (c *Client) Retry(ctx context.Context, id int64) (deckhandtype.JobState, error) {
	return c.cat.RetryJob(ctx, id)
}

// JobDetail is a job with its tasks and every attempt of them, or a page of its tasks and
// their attempts; NextTasksAfter, when set, is the TaskPage.After of the next page.
type JobDetail struct {
	deckhandtype.Job
	// Schedule is the schedule that submitted the job; nil for a job submitted by hand.
	Schedule       *deckhandtype.JobSchedule `json:"schedule,omitempty"`
	Tasks          []deckhandtype.Task       `json:"tasks"`
	Attempts       []deckhandtype.Attempt    `json:"attempts"`
	NextTasksAfter *int64                    `json:"next_tasks_after,omitempty"`
}

// Job reads a job with all its tasks and attempts.
func (c *Client) Job(ctx context.Context, id int64) (*JobDetail, error) {
	return c.JobPage(ctx, id, deckhandtype.TaskPage{})
}

// JobPage reads a job with a page of its tasks and their attempts: a job may have a million
// tasks.
func (c *Client) JobPage(ctx context.Context, id int64, page deckhandtype.TaskPage) (*JobDetail, error) {
	job, err := c.cat.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	tasks, err := c.cat.Tasks(ctx, id, page)
	if err != nil {
		return nil, err
	}
	d := &JobDetail{Job: job, Tasks: tasks}
	if err := c.fillProgress(ctx, tasks); err != nil {
		return nil, err
	}
	if d.Schedule, err = c.cat.JobSchedule(ctx, id); err != nil {
		return nil, err
	}
	var upTo int64
	if page.Limit > 0 && len(tasks) == page.Limit {
		upTo = tasks[len(tasks)-1].ID
		d.NextTasksAfter = &upTo
	}
	if len(tasks) > 0 || page.After == 0 {
		if d.Attempts, err = c.cat.Attempts(ctx, id, page.After, upTo); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// fillProgress sets the progress of the running tasks among tasks that report one.
func (c *Client) fillProgress(ctx context.Context, tasks []deckhandtype.Task) error {
	var running []int64
	for _, t := range tasks {
		if t.State == deckhandtype.TaskRunning || t.State == deckhandtype.TaskCancelling {
			running = append(running, t.ID)
		}
	}
	if len(running) == 0 {
		return nil
	}
	progress, err := c.cat.TaskProgress(ctx, running)
	if err != nil {
		return err
	}
	for i := range tasks {
		tasks[i].Progress = progress[tasks[i].ID]
	}
	return nil
}

// AddNode registers a node. The conninfo must not contain a password: workers take
// credentials from their environment (pgpass, PGPASSWORD, certificates).
func (c *Client) AddNode(ctx context.Context, n deckhandtype.Node) error {
	if n.MaxTasks <= 0 {
		n.MaxTasks = 4
	}
	if n.Group == "" {
		n.Group = n.Name
	}
	_, err := c.PutNode(ctx, n)
	return err
}

// PutNode registers a node, or updates a registered one. Unlike AddNode, an empty Group or a
// zero MaxTasks keeps the registered node's own, as the node has it when the update is made
// (one statement: a change another admin commits meanwhile is not undone); a new node takes
// the defaults (its name, 4). added reports whether the node is new. A conninfo that reaches
// a server another node of the group already reaches is refused (see refuseServerTwice).
func (c *Client) PutNode(ctx context.Context, n deckhandtype.Node) (added bool, err error) {
	if !nodeNameRE.MatchString(n.Name) {
		return false, spec.Invalidf("node %q: name must be 1-63 letters, digits, '_', '.' or '-'", n.Name)
	}
	if n.MaxTasks < 0 {
		return false, spec.Invalidf("node %q: --max-tasks must be at least 1, got %d", n.Name, n.MaxTasks)
	}
	if n.MaxTasks > 10000 {
		return false, spec.Invalidf("node %q: --max-tasks %d is too large", n.Name, n.MaxTasks)
	}
	if err := checkConninfo(n.DSN); err != nil {
		return false, spec.Invalidf("node %q: %v", n.Name, err)
	}
	if err := c.refuseServerTwice(ctx, n); err != nil {
		return false, err
	}
	return c.cat.AddNode(ctx, n)
}

// checkConninfo refuses conninfo that is malformed or carries a secret, in either form and
// any spelling (see conninfo.Check). Its errors never quote the conninfo.
func checkConninfo(dsn string) error { return nodeconn.CheckConninfo(dsn) }

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)
