package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// deckhand placements lists what the catalog places where, with the move under way of a
// placed object, as a table and as JSON, for a submitter as for an admin; a move's mark of an
// object no move placed is no placement and is not listed.
func TestPlacementsListing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cat, err := catalog.Open(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	done := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{State: deckhandtype.JobRunning}).ID
	moving := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{State: deckhandtype.JobRunning}).ID
	if err := cat.BeginMove(ctx, done, []deckhandtype.PlacedObject{{Schema: "tenant_a"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	if err := cat.SwitchPlacement(ctx, done, []deckhandtype.PlacedObject{{Schema: "tenant_a"}}, "g2"); err != nil {
		t.Fatal(err)
	}
	// A move under way of the placed tenant_a shows in its placement; one of tenant_b.orders,
	// which no move placed, is no placement and is not listed.
	if err := cat.BeginMove(ctx, moving, []deckhandtype.PlacedObject{{Schema: "tenant_a"}, {Schema: "tenant_b", Table: "orders"}}, "g2", "g3"); err != nil {
		t.Fatal(err)
	}

	role, _ := e.Submitter("router")
	r := deckhand(t, "", "--catalog", e.RoleDSN(role), "placements", "-o", "json")
	want(t, r, 0)
	var got []deckhandtype.Placement
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("placements -o json: %v\n%s", err, r.stdout)
	}
	if len(got) != 1 || got[0].Schema != "tenant_a" || got[0].Table != nil || got[0].Group != "g2" || got[0].JobID == nil || *got[0].JobID != done ||
		got[0].MovingJobID == nil || *got[0].MovingJobID != moving || got[0].MovingTo == nil || *got[0].MovingTo != "g3" {
		t.Errorf("placements -o json: %s", r.stdout)
	}
	r = e.run("placements")
	want(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "SCHEMA") || !strings.Contains(lines[1], "tenant_a") || !strings.Contains(lines[1], "*") ||
		!strings.Contains(lines[1], "to g3 by job") || strings.Contains(r.stdout, "tenant_b") {
		t.Errorf("placements table:\n%s", r.stdout)
	}
}
