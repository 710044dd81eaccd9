package api

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

var (
	scriptTag = regexp.MustCompile(`<script\b[^>]*>`)
	// importFrom matches the module specifier of an import, or of an export … from.
	importFrom = regexp.MustCompile(`(?m)^\s*(?:import\s+(?:[^'";]*?\s+from\s+)?|export\s+[^'";]*?\s+from\s+)['"]([^'"]+)['"]`)
)

func getAsset(t *testing.T, url string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	assetHandler().ServeHTTP(rec, req)
	return rec
}

// The index loads one entry module; the browser fetches the others through its imports, and
// runs each only if it is served as JavaScript.
func TestDashboardModulesAreServed(t *testing.T) {
	index := string(assets["index.html"].body)
	tags := scriptTag.FindAllString(index, -1)
	if len(tags) != 1 || tags[0] != `<script type="module" src="/assets/js/main.js">` {
		t.Fatalf("index.html loads %q, want only the entry module", tags)
	}

	seen := map[string]bool{}
	queue := []string{"js/main.js"}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		rec := getAsset(t, "/assets/"+name)
		if rec.Code != http.StatusOK {
			t.Errorf("GET /assets/%s: %d", name, rec.Code)
			continue
		}
		h := rec.Header()
		if ct := h.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
			t.Errorf("GET /assets/%s: Content-Type %q", name, ct)
		}
		if h.Get("ETag") == "" || h.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET /assets/%s: ETag %q, Cache-Control %q", name, h.Get("ETag"), h.Get("Cache-Control"))
		}
		if r := getAsset(t, "/assets/"+name, "If-None-Match", h.Get("ETag")); r.Code != http.StatusNotModified {
			t.Errorf("revalidating %s: %d, want 304", name, r.Code)
		}
		for _, m := range importFrom.FindAllStringSubmatch(rec.Body.String(), -1) {
			spec := m[1]
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") || !strings.HasSuffix(spec, ".js") {
				t.Errorf("%s imports %q: want a relative path to a .js file (no bare names: nothing resolves them)", name, spec)
				continue
			}
			queue = append(queue, path.Join(path.Dir(name), spec))
		}
	}
	var all []string
	for name := range assets {
		if strings.HasSuffix(name, ".js") {
			all = append(all, name)
			if !seen[name] {
				t.Errorf("%s is served but no module imports it", name)
			}
		}
	}
	if len(all) < 10 {
		t.Errorf("only %d modules: %q", len(all), all)
	}
	for _, name := range []string{"app.css", "favicon.svg", "index.html"} {
		if rec := getAsset(t, "/assets/"+name); rec.Code != http.StatusOK || rec.Header().Get("ETag") == "" {
			t.Errorf("GET /assets/%s: %d", name, rec.Code)
		}
	}
	if rec := getAsset(t, "/assets/app.css"); rec.Header().Get("Content-Type") != "text/css; charset=utf-8" {
		t.Errorf("app.css: Content-Type %q", rec.Header().Get("Content-Type"))
	}
}

// jsSources are the dashboard's modules by name.
func jsSources(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Text from the catalog (descriptions, SQL, errors) reaches the page as text only.
func TestDashboardNeverParsesHTML(t *testing.T) {
	for name, src := range jsSources(t) {
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "createContextualFragment",
			"DOMParser", "eval(", "new Function", "setHTML"} {
			if strings.Contains(src, bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
	}
}

// The dashboard takes the job and task states, their order and what they mean from
// /api/meta: its code names none of them. Attempt outcomes share some names (done, failed,
// cancelled) and are not states, and "running" labels an attempt still running; the names
// that belong to states alone must not appear as string literals.
func TestDashboardNamesNoState(t *testing.T) {
	var outcomes []string
	for _, o := range deckhandtype.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	outcomes = append(outcomes, string(deckhandtype.OutcomeRunning))
	var names []string
	for _, s := range slices.Concat(strs(deckhandtype.JobStates), strs(deckhandtype.TaskStates)) {
		if !slices.Contains(outcomes, s) && !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	if len(names) < 5 {
		t.Fatalf("only %q to look for", names)
	}
	for name, src := range jsSources(t) {
		for _, s := range names {
			for _, q := range []string{"'", `"`, "`"} {
				if strings.Contains(src, q+s+q) {
					t.Errorf("%s names the state %s%s%s", name, q, s, q)
				}
			}
		}
	}
}

func TestMetaStatesCoverTheCatalog(t *testing.T) {
	var jobs, tasks []string
	for _, s := range states.Jobs {
		jobs = append(jobs, string(s.Name))
	}
	for _, s := range states.Tasks {
		tasks = append(tasks, string(s.Name))
	}
	if !sameSet(jobs, strs(deckhandtype.JobStates)) || !sameSet(tasks, strs(deckhandtype.TaskStates)) {
		t.Errorf("meta lists jobs %q and tasks %q; the catalog has %q and %q", jobs, tasks, deckhandtype.JobStates, deckhandtype.TaskStates)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// strs is a list of states as plain strings.
func strs[S ~string](states []S) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}
