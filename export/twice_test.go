package export_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// A group whose primary is registered twice, under two names reaching it by different routes
// (its address and its socket; registered before node add refused that, or from psql), reads
// as a group of two primaries. The export's refusal names both and says that they are one
// server, and which to remove, rather than leave the operator looking for a split brain.
func TestExportOfAGroupWithOneServerUnderTwoNamesSaysSo(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	twice := deckhandtype.Node{Name: "p2", Group: "g1", MaxTasks: 1,
		DSN: pgcluster.DSN(g.primary.Dir, g.primary.Port, g.db, pgcluster.Superuser)}
	if _, err := g.env.Client.Catalog().AddNode(ctx, twice); err != nil {
		t.Fatal(err)
	}
	_, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + t.TempDir()})
	if err == nil {
		t.Fatal("an export of a group with its primary registered twice was taken")
	}
	for _, want := range []string{`node group "g1" has 2 primaries (p1, p2)`, "p1 and p2 are one server", "deckhand node remove p2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("export refused with %q, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("export refused with more than one line: %q", err)
	}
}
