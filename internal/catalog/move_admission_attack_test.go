package catalog_test

import (
	"context"
	"hash/crc32"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// roleSuffix makes role names of the cluster, which all tests share, unique to database db
// and short enough for an owner's name.
func roleSuffix(db string) string {
	return strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(db))), 36)
}

// openAs opens the catalog of database db as a new login role granted grant.
func openAs(t *testing.T, cl *pgcluster.Cluster, db, role, grant string) *catalog.Catalog {
	t.Helper()
	if err := pgtest.CreateLoginRole(ctx, cl, role, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Exec(context.Background(), db, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())               //nolint:errcheck
		cl.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()) //nolint:errcheck
	})
	if err := cl.Exec(ctx, "postgres", "GRANT "+grant+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.Open(ctx, cl.DSN(db, role))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A submitter keeps a transaction open after writing a move of its own schema. Nobody waits
// on it for more than a moment: another submitter's move of the schema is not held back at
// all, and a firing of the submitter's own schedule moving the schema — which the leader
// fires with every other schedule due beside it, waiting for them all — fails its statement
// after the catalog's bounded lock wait, to be tried again; so does the submitter's own
// second submission.
func TestAttackHeldMoveAdmissionStallsNobody(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	hostile := openAs(t, cl, db, "holder_"+roleSuffix(db), "deckhand_submitter")
	tenant := openAs(t, cl, db, "tenant_"+roleSuffix(db), "deckhand_submitter")
	due := time.Date(2026, 7, 1, 3, 0, 0, 0, time.UTC)
	schedule, err := hostile.AddSchedule(ctx, catalog.NewSchedule{Name: "nightly", Every: time.Hour, NextRunAt: &due,
		Spec: []byte(`{"tasks": [{"name": "n", "kind": "noop"}]}`)})
	if err != nil {
		t.Fatal(err)
	}

	tx, err := hostile.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	spec := `{"kind": "move", "tasks": [{"name": "m", "kind": "move", "payload": {"schema": "shop", "from": "g1", "to": "g2"}}]}`
	if _, err := tx.Exec(ctx, `SELECT deckhand.submit_job($1::jsonb)`, spec); err != nil {
		t.Fatal(err)
	}

	bounded := func(what string, f func(context.Context) error) error {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 8*time.Second)
		defer cancel()
		start := time.Now()
		err := f(c)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s waited %s for the open transaction (%v)", what, d.Round(time.Millisecond), err)
		}
		return err
	}
	var mine int64
	if err := bounded("another submitter's move", func(c context.Context) error {
		var err error
		mine, err = tenant.InsertJob(c, moveJob(t, "mine", "shop"))
		return err
	}); err != nil {
		t.Errorf("another submitter's move beside the open transaction: %v", err)
	}
	job := moveJob(t, "scheduled", "shop")
	var fired catalog.Fired
	err = bounded("the firing", func(c context.Context) error {
		var err error
		fired, err = admin.FireSchedule(c, catalog.Firing{ScheduleID: schedule, Expected: due, DueAt: due,
			Next: due.Add(time.Hour), Outcome: FiringSubmitted, Job: &job})
		return err
	})
	if !catalog.IsLockTimeout(err) || fired.Applied {
		t.Errorf("the firing beside the open transaction: %+v, %v; want a lock timeout, to be tried again", fired, err)
	}
	err = bounded("the holder's second submission", func(c context.Context) error {
		_, err := hostile.InsertJob(c, moveJob(t, "again", "shop"))
		return err
	})
	if !catalog.IsLockTimeout(err) {
		t.Errorf("the holder's second submission: %v; want a lock timeout", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the transaction ended and the other submitter's move was cancelled, the firing
	// goes through.
	if mine != 0 {
		if _, err := tenant.CancelJob(ctx, mine); err != nil {
			t.Fatal(err)
		}
	}
	if fired, err := admin.FireSchedule(ctx, catalog.Firing{ScheduleID: schedule, Expected: due, DueAt: due,
		Next: due.Add(time.Hour), Outcome: FiringSubmitted, Job: &job}); err != nil || !fired.Applied || fired.Outcome != FiringSubmitted {
		t.Errorf("the firing once the transaction ended: %+v, %v", fired, err)
	}
}
