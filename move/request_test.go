package move_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/move"
)

// A request is checked without a database, with one-line reasons, and its task carries a
// payload that the kind's own validation accepts.
func TestRequestTask(t *testing.T) {
	t.Parallel()
	task, err := move.Request{Schema: `App`, From: "g1", To: "g2", MaxWriteBlock: time.Second, Owner: "app"}.Task("m")
	if err != nil {
		t.Fatal(err)
	}
	if task.Kind != move.Kind || task.Node != "" || task.Owner != "app" || task.Name != "m" {
		t.Errorf("task = %+v", task)
	}
	p, err := move.ParsePayload(task.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if p.Schema != "app" || p.From != "g1" || p.To != "g2" || time.Duration(p.MaxWriteBlock) != time.Second {
		t.Errorf("payload = %+v", p)
	}
	task, err = move.Request{Tables: []string{`orders`, `"Sales"."Items"`}, From: "g1", To: "g2"}.Task("m")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(task.Payload, &raw); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(raw["tables"]); string(got) != `[["public","orders"],["Sales","Items"]]` {
		t.Errorf("tables = %s", got)
	}

	for _, tc := range []struct {
		r    move.Request
		want string
	}{
		{move.Request{From: "g1", To: "g2"}, "give --schema or --table"},
		{move.Request{Schema: "a", Tables: []string{"t"}, From: "g1", To: "g2"}, "not both"},
		{move.Request{Schema: "a", To: "g2"}, "--from is required"},
		{move.Request{Schema: "a", From: "g1"}, "--to is required"},
		{move.Request{Schema: "a", From: "g1", To: "g1"}, "--from and --to are both group g1"},
		{move.Request{Schema: "a.b", From: "g1", To: "g2"}, "a schema name has no dot"},
		{move.Request{Schema: "pg_catalog", From: "g1", To: "g2"}, "PostgreSQL's own"},
		{move.Request{Tables: []string{"t;drop"}, From: "g1", To: "g2"}, "--table: invalid name"},
		{move.Request{Tables: []string{"t", "public.t"}, From: "g1", To: "g2"}, "given twice"},
		{move.Request{Schema: "a", From: "g1", To: "g2", MaxWriteBlock: time.Millisecond}, "at least 10ms"},
	} {
		_, err := tc.r.Task("m")
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: err = %v, want one line with %q", tc.r, err, tc.want)
		}
	}
	if _, err := move.ParsePayload(json.RawMessage(`{"schema": "a", "from": "g", "to": "h", "force": true}`)); err == nil ||
		!strings.Contains(err.Error(), `unknown field "force"`) {
		t.Errorf("unknown field: %v", err)
	}
}
