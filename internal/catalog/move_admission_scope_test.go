package catalog_test

import (
	"testing"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
)

// A submitter writes, from psql (where no node checks who owns the schema), a move of another
// tenant's schema and leaves its job unfinished — paused, waiting behind a long task, or
// never claimed. The job holds the schema only for those who may act on it (and so cancel
// it): the tenant's own moves of its schema are admitted, and its `deckhand move` and
// rebalances do not see it. Admins may cancel anything, and are held by it (a job naming the
// tenant as its owner: move_admission_owner_test.go).
func TestAttackQueuedMoveOfAnotherTenantsSchemaHoldsNothing(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	suffix := roleSuffix(db)
	hostile := openAs(t, cl, db, "squatter_"+suffix, "deckhand_submitter")
	tenant := openAs(t, cl, db, "tenant_"+suffix, "deckhand_submitter")

	squat, err := hostile.InsertJob(ctx, moveJob(t, "squat", "shop"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hostile.PauseJob(ctx, squat, false); err != nil {
		t.Fatal(err)
	}
	own, err := tenant.InsertJob(ctx, moveJob(t, "mine", "shop"))
	if err != nil {
		t.Fatalf("the tenant's move of its schema beside another submitter's queued one: %v", err)
	}
	live, err := tenant.LiveMoves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range live {
		if m.JobID == squat {
			t.Errorf("the tenant's live moves list the other submitter's job: %+v", m)
		}
	}
	// The squatter's own jobs, and an admin's, are held by it.
	if _, err := hostile.InsertJob(ctx, moveJob(t, "again", "shop")); err == nil || err.Error() != heldBy("again", "schema shop", squat) {
		t.Errorf("the squatter's second move: %v, want refused naming its own job", err)
	}
	if _, err := admin.InsertJob(ctx, moveJob(t, "ops", "shop")); err == nil || err.Error() != heldBy("ops", "schema shop", squat) {
		t.Errorf("an admin's move: %v, want refused naming job %d", err, squat)
	}
	// A move that has begun (its marks) holds its objects for everyone.
	if err := admin.BeginMove(ctx, own, []PlacedObject{{Schema: "shop"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	other := openAs(t, cl, db, "other_"+suffix, "deckhand_submitter")
	if _, err := other.InsertJob(ctx, moveJob(t, "late", "shop")); err == nil || err.Error() != heldBy("late", "schema shop", own) {
		t.Errorf("a move of a schema under way: %v, want refused naming job %d", err, own)
	}
}
