package move

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// Every submission of moves is checked against the catalog's placements, a rebalance's job
// too: thousands of moves of tenant schemas over as many placed schemas. Each move's check
// read every placement, so that 2,000 moves over 100,000 placements took seconds of the
// submitter's time (and of an API request's minute) before anything was written.
func TestSubmissionCheckReadsOnlyTheSchemasPlacements(t *testing.T) {
	var placed []deckhandtype.Placement
	for i := range 100_000 {
		placed = append(placed, deckhandtype.Placement{Schema: fmt.Sprintf("tenant_%06d", i), Group: "g1"})
	}
	began := time.Now()
	bySchema := placementsBySchema(placed)
	for i := range 2000 {
		p := Payload{Schema: fmt.Sprintf("tenant_%06d", i), From: "g1", To: "g2"}
		if err := checkFrom(bySchema, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("2,000 moves over 100,000 placements checked in %s, want well under a second", took)
	}
	p := Payload{Schema: "tenant_000007", From: "g2", To: "g3"}
	if err := checkFrom(bySchema, p, nil); err == nil {
		t.Error("a move from a group the catalog does not place the schema on was not refused")
	}
}
