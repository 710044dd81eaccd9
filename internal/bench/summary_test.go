package bench

import (
	"encoding/json"
	"math"
	"testing"
)

// A summary reads the same as a line and as JSON: the same keys in the same order, each value
// with its own precision; a value that is no number is null in JSON.
func TestSummaryLineAndJSON(t *testing.T) {
	var s Summary
	s.add("tasks_per_s", 12345.678, 0)
	s.add("ratio", 0.98765, 2)
	s.add("claim_p99_ms", math.Inf(1), 1)
	if got, want := s.String(), "tasks_per_s=12346 ratio=0.99 claim_p99_ms=+Inf"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"tasks_per_s":12346,"ratio":0.99,"claim_p99_ms":null}`; got != want {
		t.Errorf("JSON %s, want %s", got, want)
	}
	if b, err := json.Marshal(Summary{}); err != nil || string(b) != "{}" {
		t.Errorf("empty summary: %s, %v", b, err)
	}
}
