package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A job's settings go, with each of its tasks that a worker claims, into the memory of that
// worker (and of the catalog's backend that answers the claim): a claim of 32 tasks of a job
// whose settings are 200 MB held 6 GB. Bounding a task's SQL and payload (16 MiB) left the
// settings, which deckhand.submit took from psql whatever their size. The catalog refuses
// settings whose names and values add up to more than 1 MiB, and so does every client.
func TestAttackHugeJobSettingsAreRefused(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	mallory, asMallory := e.Submitter("mallory")
	big := strings.Repeat("x", 2<<20)
	conn := pgtest.Connect(t, e.RoleDSN(mallory))
	for what, settings := range map[string]map[string]string{
		"one value":   {"app.blob": big},
		"many values": manySettings(20000, 100),
	} {
		doc, err := json.Marshal(map[string]any{"settings": settings,
			"tasks": []any{map[string]any{"name": "a", "node": "n1", "sql": "SELECT 1"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SELECT deckhand.submit($1::jsonb)`, string(doc)); err == nil {
			t.Errorf("deckhand.submit took a job whose settings (%s) are over 1 MiB", what)
		}
		if _, err := asMallory.Submit(ctx, &spec.Job{Settings: settings, Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}}); !engine.IsInvalid(err) {
			t.Errorf("a client submitting settings (%s) over 1 MiB: %v, want a refusal of the spec", what, err)
		}
	}
	var n int
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT count(*) FROM deckhand.job`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs written (%v)", n, err)
	}
	// Settings of a realistic size are taken.
	if _, err := asMallory.Submit(ctx, &spec.Job{Settings: map[string]string{"work_mem": "64MB", "app.note": strings.Repeat("y", 1000)},
		Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}}); err != nil {
		t.Errorf("a job with two settings: %v", err)
	}
}

// manySettings is n settings app.sNNNNNN whose values are size bytes each.
func manySettings(n, size int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("app.s%06d", i)] = strings.Repeat("v", size)
	}
	return out
}
