package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// The exports, the cleanup queue and the schedules are pages like any other registered with AddPage;
// New adds them because the catalog has them.

func (s *Server) builtinPages() []Page {
	return []Page{
		{
			Name: "exports", Title: "Exports",
			Description: "Partitions copied to object storage as Parquet. Each part is a task of the export's job: open the job for its graph and timeline.",
			Columns: []Column{
				{Key: "id", Title: "ID", Format: "number"},
				{Key: "job_id", Title: "Job", Format: "job"},
				{Key: "partition", Title: "Partition"},
				{Key: "group", Title: "Group"},
				{Key: "state", Title: "State", Format: "state"},
				{Key: "parts_done", Title: "Parts", Format: "progress", Total: "parts_total"},
				{Key: "rows", Title: "Rows", Format: "number"},
				{Key: "bytes", Title: "Written", Format: "bytes"},
				{Key: "bytes_per_second", Title: "Throughput", Format: "bytes_per_s"},
				{Key: "elapsed_ms", Title: "Elapsed", Format: "duration_ms"},
				{Key: "destination", Title: "Destination"},
				{Key: "created_at", Title: "Created", Format: "time"},
				{Key: "error", Title: "Error", Format: "error"},
			},
			List: s.listExports,
		},
		{
			Name: "cleanup", Title: "Cleanup",
			Description: "Resources registered before they were created, dropped by the leader once their operation ends, as their policy says.",
			Columns: []Column{
				{Key: "id", Title: "ID", Format: "number"},
				{Key: "job_id", Title: "Job", Format: "job"},
				{Key: "resource_type", Title: "Resource"},
				{Key: "node", Title: "Node"},
				{Key: "name", Title: "Name"},
				{Key: "policy", Title: "Policy"},
				{Key: "state", Title: "State", Format: "state"},
				{Key: "attempts", Title: "Attempts", Format: "number"},
				{Key: "next_attempt_at", Title: "Next attempt", Format: "time"},
				{Key: "created_at", Title: "Registered", Format: "time"},
				{Key: "last_error", Title: "Last error", Format: "error"},
			},
			List: s.listCleanup,
		},
		{
			Name: "schedules", Title: "Schedules",
			Description: "Job specs the leader submits at each due time, for the schedule's creator; each due time fires once.",
			Columns: []Column{
				{Key: "name", Title: "Name"},
				{Key: "timing", Title: "Timing"},
				{Key: "submitted_by", Title: "Submitter"},
				{Key: "spec_summary", Title: "Spec"},
				{Key: "next_run_at", Title: "Next run", Format: "time"},
				{Key: "last_job_id", Title: "Last job", Format: "job"},
				{Key: "last_job_state", Title: "Its state", Format: "state"},
				{Key: "last_outcome", Title: "Last firing"},
				{Key: "last_error", Title: "Last error", Format: "error"},
			},
			List: s.listSchedules,
		},
	}
}

// listSchedules answers GET /api/schedules: the schedules the caller may see, by name.
func (s *Server) listSchedules(r *http.Request) (any, error) {
	list, err := CallerClient(r).Catalog().Schedules(r.Context())
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []deckhandtype.Schedule{}
	}
	return list, nil
}

// ExportItem is an export with its progress rate, as GET /api/exports lists it.
type ExportItem struct {
	deckhandtype.Export
	ElapsedMS      int64   `json:"elapsed_ms"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

func (s *Server) listExports(r *http.Request) (any, error) {
	limit, err := limitParam(r, 100)
	if err != nil {
		return nil, err
	}
	exports, err := CallerClient(r).Exports(r.Context(), limit)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	items := make([]ExportItem, 0, len(exports))
	for _, e := range exports {
		start := e.CreatedAt
		if e.PlannedAt != nil {
			start = *e.PlannedAt
		}
		end := now
		if e.FinishedAt != nil {
			end = *e.FinishedAt
		}
		it := ExportItem{Export: e, ElapsedMS: max(0, end.Sub(start).Milliseconds())}
		if secs := end.Sub(start).Seconds(); secs > 0 {
			it.BytesPerSecond = float64(e.Bytes) / secs
		}
		items = append(items, it)
	}
	return items, nil
}

func (s *Server) listCleanup(r *http.Request) (any, error) {
	limit, err := limitParam(r, 200)
	if err != nil {
		return nil, err
	}
	f := deckhandtype.CleanupFilter{State: deckhandtype.CleanupState(r.URL.Query().Get("state")), Limit: limit}
	if f.State != "" && !slices.Contains(deckhandtype.CleanupStates, f.State) {
		return nil, &BadRequest{Msg: fmt.Sprintf("state: unknown cleanup state %q (want one of %v)", f.State, deckhandtype.CleanupStates)}
	}
	if v := r.URL.Query().Get("job"); v != "" {
		if f.JobID, err = strconv.ParseInt(v, 10, 64); err != nil || f.JobID < 1 {
			return nil, &BadRequest{Msg: fmt.Sprintf("job: want a job id, got %q", v)}
		}
	}
	recs, err := CallerClient(r).CleanupRecords(r.Context(), f)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		recs = []deckhandtype.CleanupRecord{}
	}
	return recs, nil
}

func limitParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, &BadRequest{Msg: fmt.Sprintf("limit: want 1 to %d, got %q", MaxPageSize, v)}
	}
	return n, nil
}
