package cli_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// deckhand bench -o json prints its figures as one JSON object on stdout, with the keys and
// values of the key=value line it prints otherwise; its progress lines go to stderr.
func TestBenchPrintsJSON(t *testing.T) {
	cl := pgtest.Shared(t)
	args := []string{"--catalog", cl.DSN("postgres", pgcluster.Superuser), "bench", "--tasks", "20", "--sql-tasks", "5",
		"--chain", "2", "--finished", "0", "--submit", "0", "--pgbench", "0", "--river", ""}
	asJSON := deckhand(t, "", append(args, "-o", "json")...)
	want(t, asJSON, 0)
	var figures map[string]float64
	if err := json.Unmarshal([]byte(asJSON.stdout), &figures); err != nil {
		t.Fatalf("stdout is not one JSON object of numbers: %v\n%s", err, asJSON)
	}
	for _, key := range []string{"tasks_per_s", "work_tasks_per_s", "node_tasks_per_s", "sql_tasks_per_s", "chain_p50_ms"} {
		if !(figures[key] > 0) {
			t.Errorf("%s = %v, want a positive figure\n%s", key, figures[key], asJSON)
		}
	}
	if !strings.Contains(asJSON.stderr, "noop:") || strings.Contains(asJSON.stdout, "noop:") {
		t.Errorf("progress lines belong on stderr with -o json\n%s", asJSON)
	}

	asLine := deckhand(t, "", args...)
	want(t, asLine, 0)
	lines := strings.Split(strings.TrimSpace(asLine.stdout), "\n")
	if !strings.Contains(asLine.stdout, "noop:") {
		t.Errorf("progress lines belong on stdout without -o json\n%s", asLine)
	}
	keys := map[string]bool{}
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		k, v, ok := strings.Cut(f, "=")
		if _, err := strconv.ParseFloat(v, 64); !ok || err != nil {
			t.Errorf("last line's %q is no key=number\n%s", f, asLine)
		}
		keys[k] = true
	}
	if len(keys) != len(figures) {
		t.Errorf("the line has %d keys, the JSON %d\n%s\n%s", len(keys), len(figures), asLine, asJSON)
	}
	for k := range figures {
		if !keys[k] {
			t.Errorf("JSON key %s is not on the line\n%s", k, asLine)
		}
	}
}
