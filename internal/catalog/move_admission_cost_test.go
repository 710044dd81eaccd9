package catalog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A submitter writes one job of thousands of move tasks, each of a schema of its own (a job
// may have a million tasks). Admitting it read the live moves again for each of its objects,
// each time asking, of every live move task, whether the submitter may act on it: the
// statement kept a catalog backend busy for minutes, and hours for tens of thousands. Once
// written, its tasks cost every other role's move submission two membership checks each.
// The job is admitted in seconds, and a tenant's move beside it in a moment.
func TestAttackManyMoveTasksCostTheCatalogLittle(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	suffix := roleSuffix(db)
	hostile := openAs(t, cl, db, "crowd_"+suffix, "deckhand_submitter")
	tenant := openAs(t, cl, db, "tenant_"+suffix, "deckhand_submitter")

	var b strings.Builder
	b.WriteString(`{"kind": "move", "tasks": [`)
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "m%d", "kind": "move", "payload": {"from": "g1", "to": "g2", "schema": "crowd_%d"}}`, i, i)
	}
	b.WriteString(`]}`)
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	var id int64
	if err := hostile.Pool.QueryRow(c, `SELECT deckhand.submit_job($1::jsonb)`, b.String()).Scan(&id); err != nil {
		t.Fatalf("a job of 3000 move tasks, after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if _, err := hostile.PauseJob(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	// The best of three, against a bound far above it (tens of milliseconds here) and far below what a
	// walk of the live tasks per object costs: a loaded machine stretches single runs.
	best := time.Hour
	for i := range 3 {
		start := time.Now()
		if _, err := tenant.InsertJob(ctx, moveJob(t, "mine", fmt.Sprintf("shop%d", i))); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	if best > time.Second {
		t.Errorf("the tenant's move beside 3000 live move tasks of another role took %s at best", best.Round(time.Millisecond))
	}
}
