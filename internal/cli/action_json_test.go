package cli_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// With -o json, every command that changes something prints one JSON object on stdout saying
// what it did, as job cancel and schedule pause do; node add and remove, setting set and
// reset, cleanup retry, forget and unpin printed nothing there, so a script reading stdout as
// JSON read no document at all. Without -o, they still say it in one line on stderr.
func TestActionCommandsPrintJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn := e.CatalogCluster.DSN("postgres", "")
	ctx := context.Background()
	pool := e.Client.Catalog().Pool
	job := ct.Job(ctx, t, pool, &ct.JobOpts{State: deckhandtype.JobFailed})
	op := ct.Operation(ctx, t, pool, &ct.OperationOpts{JobID: job.ID, State: deckhandtype.OperationFailed})
	failed := ct.CleanupRecord(ctx, t, pool, &ct.CleanupRecordOpts{OperationID: op, State: deckhandtype.CleanupFailed})
	forgettable := ct.CleanupRecord(ctx, t, pool, &ct.CleanupRecordOpts{OperationID: op, State: deckhandtype.CleanupFailed})
	e.AddNode("n0", 4)
	pin := strings.TrimSpace(e.run("cleanup", "pin", "--node", "n0", "public.keep").stdout)

	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"node", "add", "n9", "--dsn", dsn}, map[string]any{"name": "n9", "done": "add", "created": true}},
		{[]string{"node", "add", "n9", "--dsn", dsn, "--max-tasks", "2"}, map[string]any{"name": "n9", "done": "add", "created": false}},
		{[]string{"node", "remove", "n9"}, map[string]any{"name": "n9", "done": "remove"}},
		{[]string{"setting", "set", "retention", "2h"}, map[string]any{"name": "retention", "done": "set", "value": "2h"}},
		{[]string{"setting", "reset", "retention"}, map[string]any{"name": "retention", "done": "reset", "value": nil}},
		{[]string{"cleanup", "retry", itoa(failed)}, map[string]any{"id": float64(failed), "done": "retry"}},
		{[]string{"cleanup", "forget", itoa(forgettable)}, map[string]any{"id": float64(forgettable), "done": "forget"}},
		{[]string{"cleanup", "unpin", pin}, map[string]any{"id": json.Number(pin), "done": "unpin"}},
	} {
		r := e.run(append(tc.args, "-o", "json")...)
		want(t, r, 0)
		if r.stderr != "" {
			t.Errorf("%v: stderr should be empty, got %q", tc.args, r.stderr)
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if _, ok := tc.want["id"].(json.Number); ok {
			dec.UseNumber()
		}
		var got map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Errorf("%v -o json: not one JSON object: %v\n%s", tc.args, err, r.stdout)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v -o json: %s = %#v, want %#v (%s)", tc.args, k, got[k], v, r.stdout)
			}
		}
	}

	// Without -o json: nothing on stdout, one line on stderr, as before.
	r := e.run("node", "add", "n8", "--dsn", dsn)
	if want(t, r, 0); r.stdout != "" || r.stderr != "node n8 registered\n" {
		t.Errorf("node add: %s", r)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A submission with -o json prints one object naming what it made, as schedule add, export
// and move do: job run, job submit, drop and cleanup pin printed the bare id, which is no
// object saying what was done. Without -o the id alone stays on stdout, for `id=$(...)`.
func TestSubmissionsPrintJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	for _, tc := range []struct {
		stdin string
		args  []string
		done  string
	}{
		{"", []string{"job", "run", "--node", "n1", "SELECT 1"}, "submit"},
		{specJSON, []string{"job", "submit", "-"}, "submit"},
		{"", []string{"drop", "--node", "n1", "public.gone"}, "submit"},
		{"", []string{"cleanup", "pin", "--node", "n1", "public.keep"}, "pin"},
	} {
		r := e.runIn(tc.stdin, append(tc.args, "-o", "json")...)
		want(t, r, 0)
		var got map[string]any
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&got); err != nil || dec.More() {
			t.Errorf("%v -o json: not one JSON object (%v):\n%s", tc.args, err, r.stdout)
			continue
		}
		if id, ok := got["id"].(float64); !ok || id <= 0 || got["done"] != tc.done {
			t.Errorf("%v -o json = %s; want an id and done %q", tc.args, r.stdout, tc.done)
		}
		if r := e.runIn(tc.stdin, tc.args...); r.code != 0 || strings.Trim(r.stdout, "0123456789") != "\n" {
			t.Errorf("%v without -o: want the id alone on stdout, got %s", tc.args, r)
		}
	}
}
