package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
)

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
	// pill), job (a link to the job), time, duration_ms, bytes, bytes_per_s, number, error
	// (a message, kept to one line with the whole of it on hover), or progress (Key done out
	// of the value at Total). AddPage refuses any other.
	Format string `json:"format,omitempty"`
	Total  string `json:"total,omitempty"` // the key of the total, for progress
}

// columnFormats are the formats the dashboard knows.
var columnFormats = []string{"", "text", "state", "job", "time", "duration_ms", "bytes", "bytes_per_s", "number", "error", "progress"}

var pageName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// reservedPages are names the API uses itself.
var reservedPages = []string{"jobs", "nodes", "workers", "summary", "events", "meta"}

// AddPage registers GET /api/<p.Name> and adds the page to the dashboard's navigation. It
// refuses a name that is taken or not a path segment, and a column without a Key, of an
// unknown Format, or of format progress without a Total.
func (s *Server) AddPage(p Page) error {
	if !pageName.MatchString(p.Name) || slices.Contains(reservedPages, p.Name) {
		return fmt.Errorf("api: page name %q is not usable", p.Name)
	}
	if p.List == nil {
		return fmt.Errorf("api: page %q has no List", p.Name)
	}
	for i, c := range p.Columns {
		switch {
		case c.Key == "":
			return fmt.Errorf("api: page %q: column %d has no Key", p.Name, i+1)
		case !slices.Contains(columnFormats, c.Format):
			return fmt.Errorf("api: page %q: column %q: unknown format %q (want one of %v)", p.Name, c.Key, c.Format, columnFormats[1:])
		case c.Format == "progress" && c.Total == "":
			return fmt.Errorf("api: page %q: column %q: a progress column needs Total, the key of its total", p.Name, c.Key)
		}
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
