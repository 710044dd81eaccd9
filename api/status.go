package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// listNodes serves GET /api/nodes: the registered nodes.
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
	all, err := strconv.ParseBool(cmp.Or(r.URL.Query().Get("stopped"), "false"))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("stopped must be true or false, got %q", r.URL.Query().Get("stopped")))
		return
	}
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
		// /healthz answers anyone: the driver's error, which names the catalog's host, port,
		// database and the server's role, goes to the log only.
		s.log.Warn("health check: the catalog did not answer", "err", nodeconn.Redact(spec.OneLine(err.Error())))
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "catalog_unreachable", Error: "the catalog did not answer"})
	case leader == 0:
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "no_leader", Error: "no worker holds the leader lease"})
	default:
		writeJSON(w, http.StatusOK, Health{Status: "ok", LeaderID: &leader})
	}
}
