package catalog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A move task written from psql (where nothing checks a move's payload) naming a hundred
// thousand tables, a megabyte and a half of JSON: every object of a live move was read with
// the whole payload again (its target group), so that this submission, and each move
// submission after it that read the live moves, kept a catalog backend busy for hours. The
// catalog refuses a move of more tables than package move takes, in one line, at once; and a
// move of as many as it takes costs the moves submitted after it nothing to speak of.
func TestAttackHugeMovePayloadCostsTheCatalogNothing(t *testing.T) {
	cat := migratedCatalog(t)
	spec := func(name string, tables int) string {
		var b strings.Builder
		fmt.Fprintf(&b, `{"kind": "move", "tasks": [{"name": %q, "kind": "move", "payload": {"from": "g1", "to": "g2", "tables": [`, name)
		for i := range tables {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `["%s_%d", "t"]`, name, i)
		}
		b.WriteString(`]}}]}`)
		return b.String()
	}
	submit := func(what, doc string) error {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		start := time.Now()
		var id int64
		err := cat.Pool.QueryRow(c, `SELECT deckhand.submit_job($1::jsonb)`, doc).Scan(&id)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s took %s (%v)", what, d.Round(time.Millisecond), err)
		}
		return err
	}
	err := submit("a move of 100,000 tables", spec("huge", 100000))
	if want := `task "huge": at most 1000 tables per move`; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("a move of 100,000 tables: %v; want refused with %q", err, want)
	}
	for i := range 3 {
		if err := submit("a move of 1000 tables", spec(fmt.Sprintf("wide%d", i), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := submit("a move beside them", spec("small", 1)); err != nil {
		t.Fatal(err)
	}
}
