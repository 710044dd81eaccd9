package catalog_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// A submitter writes, from psql, moves of another tenant's schema naming the tenant as their
// owner (the catalog does not ask whether the submitter may run as the tenant: the nodes do,
// when the task runs) and keeps the jobs from ending (paused), or writes one at each firing of
// a schedule. Such a job can never run, yet, the tenant being able to act on it,
// it held the schema against the tenant's own moves: the tenant had to find and cancel each
// before moving its schema. A move that has not begun now holds its objects against a role
// other than its submitter only if the submitter is, in the catalog's cluster, a member of
// every owner of the job. A submitter that is (a deputy of the tenant) still holds them.
func TestAttackQueuedMoveNamingTheTenantAsOwnerHoldsNothing(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	suffix := roleSuffix(db)
	tenantRole := "tenant_" + suffix
	hostile := openAs(t, cl, db, "squatter_"+suffix, "deckhand_submitter")
	tenant := openAs(t, cl, db, tenantRole, "deckhand_submitter")
	deputy := openAs(t, cl, db, "deputy_"+suffix, "deckhand_submitter")
	if err := cl.Exec(ctx, "postgres", "GRANT "+pgx.Identifier{tenantRole}.Sanitize()+" TO "+pgx.Identifier{"deputy_" + suffix}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	forged := moveJob(t, "forged", "shop")
	forged.Tasks[0].Owner = tenantRole
	squat, err := hostile.InsertJob(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hostile.PauseJob(ctx, squat, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.InsertJob(ctx, moveJob(t, "mine", "shop")); err != nil {
		t.Errorf("the tenant's move of its schema beside jobs another submitter wrote in its name: %v", err)
	}
	live, err := tenant.LiveMoves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range live {
		if m.JobID == squat {
			t.Errorf("the tenant's live moves list a job it did not submit and whose submitter may not run as it: %+v", m)
		}
	}
	// The squatter's own moves are held by its jobs.
	if _, err := hostile.InsertJob(ctx, moveJob(t, "again", "shop")); err == nil {
		t.Errorf("the squatter's own move beside its jobs was admitted")
	}

	// A deputy, a member of the tenant, writing a move in the tenant's name holds the schema
	// for the tenant, which may cancel it.
	job := moveJob(t, "deputy", "crm")
	job.Tasks[0].Owner = tenantRole
	held, err := deputy.InsertJob(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.InsertJob(ctx, moveJob(t, "crm", "crm")); err == nil || err.Error() != heldBy("crm", "schema crm", held) {
		t.Errorf("the tenant's move beside its deputy's: %v, want refused naming job %d", err, held)
	}
}
