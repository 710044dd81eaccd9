package api

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/spec"
)

// MaxPageSize is the most jobs one GET /api/jobs returns.
const MaxPageSize = 500

// maxSpecBytes bounds a submitted spec; a job of thousands of tasks fits comfortably.
const maxSpecBytes = 8 << 20

// JobList is the answer to GET /api/jobs. NextBefore, when set, is the ?before= of the next
// (older) page; it is nil on the last page.
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
	// One job more than the page tells whether an older page exists, so that a full last
	// page has no next_before leading to an empty one.
	limit := f.Limit
	f.Limit++
	jobs, err := CallerClient(r).Jobs(r.Context(), f)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	out := JobList{Jobs: jobs}
	if len(jobs) > limit {
		out.Jobs = jobs[:limit]
		last := out.Jobs[limit-1].ID
		out.NextBefore = &last
	}
	if out.Jobs == nil {
		out.Jobs = []deckhandtype.Job{}
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
