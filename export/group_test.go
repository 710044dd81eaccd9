package export_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// group is a primary with one streaming standby, registered as node group g1 in a catalog of
// the test's own. Database db on it holds the partitioned table events, 60,000 rows of them
// in partition events_2024 and none in events_2025.
type group struct {
	env              *testenv.Env
	primary, standby *pgcluster.Cluster
	db               string
}

const shopSchema = `
	CREATE TABLE events (id bigint NOT NULL, at timestamptz NOT NULL, kind int, note text, doc jsonb, amount numeric(12,2))
		PARTITION BY RANGE (at);
	CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
	CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
	INSERT INTO events SELECT g, '2024-01-01'::timestamptz + g * interval '1 minute', g % 7,
		CASE WHEN g % 5 = 0 THEN NULL ELSE 'note ' || g END, jsonb_build_object('g', g), g / 100.0
	FROM generate_series(1, 60000) g;`

// sharedPair is the primary and standby that newGroup's tests share: starting a pair and
// loading the table costs seconds of CPU, most of an export test's own. It is started on first
// use and stopped by pgtest.Main with every other cluster. Database shop on it is the template
// each test's database is copied from.
var sharedPair struct {
	once             sync.Once
	primary, standby *pgcluster.Cluster
	err              error
	seq              atomic.Int64
}

// newGroup gives the test a database of its own, a copy of the shop, on a primary and standby
// shared with the package's other tests. Such a test must neither stop, promote nor reconfigure
// the two servers, must undo what it does outside its database (roles: see role; a paused
// replay), and must not run in parallel with a test that pauses the standby's replay.
func newGroup(t *testing.T, maxTasks int) *group {
	t.Helper()
	e := testenv.New(t, export.Feature())
	sharedPair.once.Do(func() {
		sharedPair.primary, sharedPair.standby, sharedPair.err = startPair(pgcluster.Options{}, "shop")
	})
	if sharedPair.err != nil {
		t.Fatalf("starting the shared primary and standby: %v", sharedPair.err)
	}
	primary, standby := sharedPair.primary, sharedPair.standby
	db := fmt.Sprintf("shop_%d", sharedPair.seq.Add(1))
	if err := primary.CreateDatabaseFrom(ctx, db, "shop"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// As pgtest does for a test's own servers: the log is the clue to what they saw.
			t.Logf("shared primary's log (tail):\n%s", primary.LogTail(40))
			t.Logf("shared standby's log (tail):\n%s", standby.LogTail(40))
		}
		if err := primary.DropDatabase(ctx, db); err != nil {
			t.Errorf("dropping database %s: %v", db, err)
		}
	})
	// The standby must have the database before a worker connects to it there.
	lsn, err := primary.CurrentLSN(ctx)
	if err == nil {
		err = standby.WaitReplayed(ctx, lsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	return register(t, e, primary, standby, db, maxTasks)
}

// newOwnGroup is newGroup on a primary and standby of the test's own, made with opts, for
// tests that stop, promote or reconfigure them. The database is named shop.
func newOwnGroup(t *testing.T, maxTasks int, opts pgcluster.Options) *group {
	t.Helper()
	e := testenv.New(t, export.Feature())
	primary := pgtest.New(t, opts)
	if err := loadShop(primary, "shop"); err != nil {
		t.Fatal(err)
	}
	standby := pgtest.NewStandby(t, primary, opts)
	return register(t, e, primary, standby, "shop", maxTasks)
}

// startPair starts a primary holding database db and a standby of it, outside any test.
func startPair(opts pgcluster.Options, db string) (primary, standby *pgcluster.Cluster, err error) {
	start, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if primary, err = pgcluster.Start(start, opts); err != nil {
		return nil, nil, err
	}
	if err = loadShop(primary, db); err != nil {
		return nil, nil, err
	}
	if standby, err = primary.StartStandby(start, opts); err != nil {
		return nil, nil, err
	}
	return primary, standby, nil
}

func loadShop(primary *pgcluster.Cluster, db string) error {
	if err := primary.CreateDatabase(ctx, db); err != nil {
		return err
	}
	return primary.Exec(ctx, db, shopSchema)
}

func register(t *testing.T, e *testenv.Env, primary, standby *pgcluster.Cluster, db string, maxTasks int) *group {
	t.Helper()
	for name, cl := range map[string]*pgcluster.Cluster{"p1": primary, "s1": standby} {
		if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: name, DSN: cl.DSN(db, pgcluster.Superuser), Group: "g1", MaxTasks: maxTasks}); err != nil {
			t.Fatal(err)
		}
	}
	return &group{env: e, primary: primary, standby: standby, db: db}
}

// role creates login role name on the group's primary for this test, dropped (with what it was
// granted in the test's database) when the test ends: roles belong to the whole server, which
// other tests share.
func (g *group) role(t *testing.T, name string) {
	t.Helper()
	if err := g.primary.CreateRole(ctx, name, "LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.primary.Exec(ctx, g.db, "DROP OWNED BY "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Errorf("dropping what role %s owns: %v", name, err)
		}
		if err := g.primary.Exec(ctx, "postgres", "DROP ROLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Errorf("dropping role %s: %v", name, err)
		}
	})
}
