package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The meter finds the harness's server on this machine, and puts the CPU a session burns
// under the session's database, and what a session that ended used under "".
func TestCPUMeterChargesSessionsToTheirDatabase(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, cl.DSN("postgres", pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx) //nolint:errcheck
	m := newCPUMeter(ctx, admin)
	if m == nil {
		t.Fatal("the harness's server, on this machine, was not recognised as local")
	}
	db := pgtest.NewDatabase(t)
	burner, err := pgx.Connect(ctx, cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	burn := func(c *pgx.Conn) {
		t.Helper()
		if _, err := c.Exec(ctx, `SELECT count(*) FROM pg_catalog.generate_series(1, 4000000)`); err != nil {
			t.Fatal(err)
		}
	}
	before, err := m.sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	burn(burner)
	after, err := m.sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := after.since(before); c.byDB[db] < 100*time.Millisecond || c.byDB["postgres"] > c.byDB[db]/2 {
		t.Errorf("a session of %s burnt CPU; the meter charged %v to it and %v to the admin's database", db, c.byDB[db], c.byDB["postgres"])
	}

	// The same session burns again and ends: its CPU since the first sample is then among
	// the processes that ended, neither lost nor counted twice.
	burn(burner)
	if err := burner.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ended, err := m.sessionsEnded(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	c := ended.since(after)
	if c.byDB[db] != 0 || c.byDB[""] < 100*time.Millisecond || c.byDB[""] > 3*(after.since(before).byDB[db]+50*time.Millisecond) {
		t.Errorf("after the session ended: %v under its database, %v under the ended and other processes; want 0 and about one burn",
			c.byDB[db], c.byDB[""])
	}
}
