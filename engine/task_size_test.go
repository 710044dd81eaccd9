package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task's SQL and payload go whole into the memory of the worker that claims it, which
// every other user's running tasks share, a claim's worth of tasks at once. From psql
// (deckhand.submit) nothing bounded them but PostgreSQL's 1 GB: a few tasks of a few hundred
// megabytes each killed the worker that claimed them, and, retried, the next ones. The
// catalog refuses more than 16 MiB of either, and so does every client before writing.
func TestAttackHugeTaskTextIsRefused(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	mallory, asMallory := e.Submitter("mallory")
	big := "SELECT '" + strings.Repeat("x", 16<<20) + "'"
	conn := pgtest.Connect(t, e.RoleDSN(mallory))
	for what, task := range map[string]map[string]any{
		"sql":     {"name": "a", "node": "n1", "sql": big},
		"payload": {"name": "a", "node": "n1", "kind": "drop", "payload": map[string]any{"tables": []string{big}}},
	} {
		doc, err := json.Marshal(map[string]any{"tasks": []any{task}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SELECT deckhand.submit($1::jsonb)`, string(doc)); err == nil {
			t.Errorf("deckhand.submit took a task whose %s is over 16 MiB", what)
		}
	}
	if _, err := asMallory.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: big}}}); !engine.IsInvalid(err) {
		t.Errorf("a client submitting a task whose sql is over 16 MiB: %v, want a refusal of the spec", err)
	}
	var n int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM deckhand.task`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tasks written (%v)", n, err)
	}
	// Up to the limit is taken.
	ok := "SELECT '" + strings.Repeat("x", 1<<20) + "'"
	if _, err := asMallory.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: ok}}}); err != nil {
		t.Errorf("a task of 1 MiB of sql: %v", err)
	}
}
