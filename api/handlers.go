package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// MaxPageSize is the most jobs one GET /api/jobs returns.
const MaxPageSize = 500

// maxSpecBytes bounds a submitted spec; a job of thousands of tasks fits comfortably.
const maxSpecBytes = 8 << 20

// JobList is the answer to GET /api/jobs. NextBefore, when set, is the ?before= of the next
// (older) page.
type JobList struct {
	Jobs       []deckhandtype.Job `json:"jobs"`
	NextBefore *int64             `json:"next_before"`
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := deckhandtype.JobFilter{State: deckhandtype.JobState(q.Get("state")), Limit: 50}
	if f.State != "" && !slices.Contains(deckhandtype.JobStates, f.State) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state: unknown job state %q (want one of %v)", f.State, deckhandtype.JobStates))
		return
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("before: want a job id, got %q", v))
			return
		}
		f.BeforeID = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit: want 1 to %d, got %q", MaxPageSize, v))
			return
		}
		f.Limit = n
	}
	jobs, err := CallerClient(r).Jobs(r.Context(), f)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	out := JobList{Jobs: jobs}
	if out.Jobs == nil {
		out.Jobs = []deckhandtype.Job{}
	}
	if len(jobs) == f.Limit {
		last := jobs[len(jobs)-1].ID
		out.NextBefore = &last
	}
	writeJSON(w, http.StatusOK, out)
}

// MaxTasksPage is the most tasks one GET /api/jobs/{id} returns, and DefaultTasksPage the
// number it returns unless asked: a job may have a million tasks.
const (
	MaxTasksPage     = 10000
	DefaultTasksPage = 1000
)

// JobDetail is the answer to GET /api/jobs/{id}: the job, a page of its tasks (?tasks_after=
// ID&tasks_limit=N, in id order) and their attempts. NextTasksAfter, when set, is the
// ?tasks_after= of the next page. ServerTime lets a client draw running attempts up to "now"
// without trusting its own clock.
type JobDetail struct {
	*engine.JobDetail
	ServerTime time.Time `json:"server_time"`
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	page := deckhandtype.TaskPage{Limit: DefaultTasksPage}
	q := r.URL.Query()
	if v := q.Get("tasks_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("tasks_after: want a task id, got %q", v))
			return
		}
		page.After = n
	}
	if v := q.Get("tasks_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTasksPage {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("tasks_limit: want 1 to %d, got %q", MaxTasksPage, v))
			return
		}
		page.Limit = n
	}
	d, err := CallerClient(r).JobPage(r.Context(), id, page)
	if errors.Is(err, catalog.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %d not found", id))
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if d.Tasks == nil {
		d.Tasks = []deckhandtype.Task{}
	}
	if d.Attempts == nil {
		d.Attempts = []deckhandtype.Attempt{}
	}
	writeJSON(w, http.StatusOK, JobDetail{JobDetail: d, ServerTime: time.Now()})
}

// submitJob takes the spec `deckhand job submit` takes (JSON, or YAML) and validates it the
// same way. The job is submitted as the caller's role, so the owners it may name are the
// roles the caller is a member of on each node.
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	// A content type a form cannot send makes a cross-site submission need a CORS preflight,
	// which this server never grants. The media type itself decides: a page elsewhere may send
	// text/plain with any parameters ("text/plain; x=json") without one.
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !strings.Contains(ct, "json") && !strings.Contains(ct, "yaml") {
		writeError(w, http.StatusUnsupportedMediaType, "send the job spec as application/json (or application/yaml)")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("read spec: %v", err))
		return
	}
	job, err := spec.Parse(body) // Submit validates it against the kinds the server knows
	var id int64
	if err == nil {
		id, err = CallerClient(r).Submit(r.Context(), job)
	}
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrDuplicateKey):
		writeDuplicate(w, err)
		return
	case refusedByCatalog(err):
		s.serverError(w, r, err)
		return
	case engine.IsInvalid(err), errors.Is(err, catalog.ErrNotFound):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	default:
		s.serverError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/jobs/"+strconv.FormatInt(id, 10))
	writeJSON(w, http.StatusCreated, map[string]int64{"id": id})
}

// StateChange is the answer to cancel and retry.
type StateChange struct {
	ID    int64                 `json:"id"`
	State deckhandtype.JobState `json:"state"`
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	state, err := CallerClient(r).Cancel(r.Context(), id)
	if err != nil {
		s.controlError(w, r, id, "cancel", err)
		return
	}
	writeJSON(w, http.StatusOK, StateChange{ID: id, State: state})
}

// pauseJob pauses a job; ?now=1 (or true) also stops its running tasks.
func (s *Server) pauseJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	now, err := strconv.ParseBool(cmp.Or(r.URL.Query().Get("now"), "false"))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("now must be true or false, got %q", r.URL.Query().Get("now")))
		return
	}
	state, err := CallerClient(r).Pause(r.Context(), id, now)
	if err != nil {
		s.controlError(w, r, id, "pause", err)
		return
	}
	writeJSON(w, http.StatusOK, StateChange{ID: id, State: state})
}

func (s *Server) resumeJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	state, err := CallerClient(r).Resume(r.Context(), id)
	if err != nil {
		s.controlError(w, r, id, "resume", err)
		return
	}
	writeJSON(w, http.StatusOK, StateChange{ID: id, State: state})
}

func (s *Server) retryJob(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	state, err := CallerClient(r).Retry(r.Context(), id)
	if err != nil {
		s.controlError(w, r, id, "retry", err)
		return
	}
	writeJSON(w, http.StatusOK, StateChange{ID: id, State: state})
}

// controlError tells a refused cancel or retry (403, 404, 409) from a failure (500). The
// catalog refuses a role that may not act on the job (403), or a job in the wrong state;
// reading the job again, as the caller, names that state for the user.
func (s *Server) controlError(w http.ResponseWriter, r *http.Request, id int64, action string, err error) {
	if errors.Is(err, catalog.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %d not found", id))
		return
	}
	if refusedByCatalog(err) {
		s.serverError(w, r, err)
		return
	}
	if errors.Is(err, catalog.ErrJobTerminal) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if errors.Is(err, engine.ErrDuplicateKey) {
		writeDuplicate(w, err)
		return
	}
	job, rerr := CallerClient(r).JobRow(r.Context(), id)
	switch {
	case errors.Is(rerr, catalog.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("job %d not found", id))
	case rerr != nil:
		s.serverError(w, r, err)
	case action == "cancel" && job.State.Terminal():
		writeError(w, http.StatusConflict, fmt.Sprintf("job %d is already %s", id, job.State))
	case action == "retry" && !retryable(job.State):
		writeError(w, http.StatusConflict, fmt.Sprintf("job %d is %s: only failed or cancelled jobs can be retried", id, job.State))
	default:
		s.serverError(w, r, err)
	}
}

// writeDuplicate answers a job refused for its key: 409 with the id of the unfinished job that
// holds the key ("id" is absent when the caller may not see that job).
func writeDuplicate(w http.ResponseWriter, err error) {
	body := map[string]any{"error": spec.OneLine(err.Error())}
	var dup *engine.DuplicateKeyError
	if errors.As(err, &dup) && dup.JobID > 0 {
		body["id"] = dup.JobID
	}
	writeJSON(w, http.StatusConflict, body)
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("want a job id, got %q", v))
		return 0, false
	}
	return id, true
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := CallerClient(r).Nodes(r.Context())
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if nodes == nil {
		nodes = []deckhandtype.Node{}
	}
	for i := range nodes {
		nodes[i].DSN = nodeconn.Redact(nodes[i].DSN)
		if nodes[i].LastError != nil {
			e := nodeconn.Redact(*nodes[i].LastError)
			nodes[i].LastError = &e
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes})
}

// WorkerList is the answer to GET /api/workers.
type WorkerList struct {
	LeaderID *int64                `json:"leader_id"`
	Workers  []deckhandtype.Worker `json:"workers"`
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	all := r.URL.Query().Get("stopped") == "true" || r.URL.Query().Get("stopped") == "1"
	workers, err := CallerClient(r).Workers(r.Context(), all)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	leader, err := CallerClient(r).Leader(r.Context())
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	out := WorkerList{Workers: workers}
	if out.Workers == nil {
		out.Workers = []deckhandtype.Worker{}
	}
	if leader != 0 {
		out.LeaderID = &leader
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) summary(w http.ResponseWriter, r *http.Request) {
	st, err := s.stats.get(r.Context())
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Meta is the answer to GET /api/meta: what the dashboard needs to draw its frame.
type Meta struct {
	SchemaVersion int                      `json:"schema_version"`
	User          string                   `json:"user"`        // the catalog role the caller acts as
	JobStates     []deckhandtype.JobState  `json:"job_states"`  // every job state, in lifecycle order
	TaskStates    []deckhandtype.TaskState `json:"task_states"` // every task state, in lifecycle order
	States        States                   `json:"states"`
	Pages         []Page                   `json:"pages"`
}

// States describes every job and task state in the order the dashboard lists them, with
// what each means for display and for the buttons it offers. The dashboard knows no state
// by name: a state added to the catalog needs a place in the orders below, not a change to
// its JavaScript.
type States struct {
	Jobs  []JobState  `json:"jobs"`
	Tasks []TaskState `json:"tasks"`
}

// JobState is one job state as the dashboard shows it.
type JobState struct {
	Name   deckhandtype.JobState `json:"name"`
	Ended  bool                  `json:"ended"`  // the job will not change again on its own
	Cancel bool                  `json:"cancel"` // the dashboard offers Cancel: not ended, and no cancel requested yet
	Retry  bool                  `json:"retry"`  // POST /api/jobs/{id}/retry accepts a job in this state
	Pause  bool                  `json:"pause"`  // POST /api/jobs/{id}/pause accepts a job in this state
	Resume bool                  `json:"resume"` // POST /api/jobs/{id}/resume accepts a job in this state
}

// TaskState is one task state as the dashboard shows it.
type TaskState struct {
	Name      deckhandtype.TaskState `json:"name"`
	Pending   bool                   `json:"pending"`   // not started: waits for its dependencies or for a worker
	Claimable bool                   `json:"claimable"` // a worker may claim it once not_before (its backoff) has passed
	Active    bool                   `json:"active"`    // a backend runs it on its node
	Succeeded bool                   `json:"succeeded"` // it did its work: its dependents may run
	Ended     bool                   `json:"ended"`     // it will not run again on its own
}

// The dashboard's orders: jobs with what is moving first, then what waits, then what ended;
// a job's tasks with what is done first, as its progress bar reads. Every state appears
// once (TestMetaStatesCoverTheCatalog).
var (
	dashboardJobOrder = []deckhandtype.JobState{deckhandtype.JobRunning, deckhandtype.JobScheduled, deckhandtype.JobFailing, deckhandtype.JobPausing,
		deckhandtype.JobPaused, deckhandtype.JobCancelling, deckhandtype.JobFinished, deckhandtype.JobFailed, deckhandtype.JobCancelled}
	dashboardTaskOrder = []deckhandtype.TaskState{deckhandtype.TaskDone, deckhandtype.TaskRunning, deckhandtype.TaskCancelling, deckhandtype.TaskRunnable,
		deckhandtype.TaskPaused, deckhandtype.TaskBlocked, deckhandtype.TaskFailed, deckhandtype.TaskUnscheduled, deckhandtype.TaskCancelled}
)

// retryable reports whether a job in state s can be retried.
func retryable(s deckhandtype.JobState) bool {
	return s == deckhandtype.JobFailed || s == deckhandtype.JobCancelled
}

// states is computed once: it depends on nothing but the catalog's definitions.
var states = func() States {
	var out States
	for _, s := range dashboardJobOrder {
		ended := s.Terminal()
		paused := s == deckhandtype.JobPausing || s == deckhandtype.JobPaused
		out.Jobs = append(out.Jobs, JobState{Name: s, Ended: ended,
			Cancel: !ended && s != deckhandtype.JobCancelling, Retry: retryable(s),
			Pause: !ended && s != deckhandtype.JobCancelling && !paused, Resume: paused})
	}
	for _, s := range dashboardTaskOrder {
		out.Tasks = append(out.Tasks, TaskState{Name: s,
			Pending:   s == deckhandtype.TaskBlocked || s == deckhandtype.TaskRunnable || s == deckhandtype.TaskPaused,
			Claimable: s == deckhandtype.TaskRunnable,
			Active:    s == deckhandtype.TaskRunning || s == deckhandtype.TaskCancelling,
			Succeeded: s == deckhandtype.TaskDone,
			Ended:     s.Terminal()})
	}
	return out
}()

func (s *Server) meta(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	pages := append([]Page{}, s.pages...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, Meta{SchemaVersion: catalog.SchemaVersion(), User: CallerRole(r),
		JobStates: deckhandtype.JobStates, TaskStates: deckhandtype.TaskStates, States: states, Pages: pages})
}

// Health is the answer to GET /healthz.
type Health struct {
	Status   string `json:"status"` // ok, no_leader, catalog_unreachable
	LeaderID *int64 `json:"leader_id"`
	Error    string `json:"error,omitempty"`
}

// healthz is 200 when the catalog answers and a worker holds the leader lease: then jobs
// make progress and dead workers' tasks are rescued. It is 503 otherwise.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	leader, err := s.client.Leader(ctx)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "catalog_unreachable", Error: nodeconn.Redact(spec.OneLine(err.Error()))})
	case leader == 0:
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "no_leader", Error: "no worker holds the leader lease"})
	default:
		writeJSON(w, http.StatusOK, Health{Status: "ok", LeaderID: &leader})
	}
}

// Page is an extra section of the API and the dashboard, such as exports or the cleanup
// queue. AddPage serves List at GET /api/<Name> as {"items": [...]}, and the dashboard
// lists the items in a table with Columns.
type Page struct {
	Name  string `json:"name"`  // path segment: lower-case letters, digits and '-'
	Title string `json:"title"` // shown in the navigation
	// Description is one line shown under the title.
	Description string   `json:"description,omitempty"`
	Columns     []Column `json:"columns"`
	// List returns the items: a slice of objects whose JSON fields the columns name. It should
	// read a bounded number of rows (page on r's query when needed).
	List func(r *http.Request) (any, error) `json:"-"`
}

// Column is one column of a Page's table.
type Column struct {
	Key   string `json:"key"`
	Title string `json:"title"`
	// Format is how the dashboard shows the value: text (default), state (a coloured
	// pill), job (a link to the job), time, duration_ms, bytes, number, or progress (Key
	// done out of the value at Total).
	Format string `json:"format,omitempty"`
	Total  string `json:"total,omitempty"`
}

var pageName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// reservedPages are names the API uses itself.
var reservedPages = []string{"jobs", "nodes", "workers", "summary", "events", "meta"}

// AddPage registers GET /api/<p.Name> and adds the page to the dashboard's navigation.
func (s *Server) AddPage(p Page) error {
	if !pageName.MatchString(p.Name) || slices.Contains(reservedPages, p.Name) {
		return fmt.Errorf("api: page name %q is not usable", p.Name)
	}
	if p.List == nil {
		return fmt.Errorf("api: page %q has no List", p.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.pages {
		if q.Name == p.Name {
			return fmt.Errorf("api: page %q is registered twice", p.Name)
		}
	}
	if p.Title == "" {
		p.Title = p.Name
	}
	s.pages = append(s.pages, p)
	list := p.List
	s.mux.HandleFunc("GET /api/"+p.Name, func(w http.ResponseWriter, r *http.Request) {
		items, err := list(r)
		var bad *BadRequest
		if errors.As(err, &bad) {
			writeError(w, http.StatusBadRequest, bad.Msg)
			return
		}
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": items})
	})
	return nil
}

// BadRequest, returned by a Page's List, answers 400 with Msg.
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }
