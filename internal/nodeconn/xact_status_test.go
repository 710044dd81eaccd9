package nodeconn_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// What a node says of a transaction id it has not given out is final only from a primary: a
// primary that says so never ran the transaction (the conninfo reaches another server), but a
// standby says the same of a transaction its primary committed and it has not replayed yet,
// and taking that for "did not commit" would run a committed task again.
func TestXactStatusOfAnIDNotGivenOut(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	primary := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	if err := primary.Exec(ctx, db, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	if err := standby.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, primary.DSN(db, pgcluster.Superuser))
	defer conn.Close(ctx)
	var xid string
	if err := conn.QueryRow(ctx, `INSERT INTO t VALUES (1) RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	pools := nodeconn.NewPools(2)
	defer pools.Close()
	owner := func(c *pgcluster.Cluster) nodeconn.Owner {
		return nodeconn.Owner{Node: "n1", DSN: c.DSN(db, pgcluster.Superuser), Role: pgcluster.Superuser, Submitter: pgcluster.Superuser}
	}
	if a, err := nodeconn.XactStatus(ctx, pools, owner(primary), xid); err != nil || a.Status != nodeconn.XactCommitted {
		t.Errorf("the primary of its own committed transaction: %+v, %v; want committed", a, err)
	}
	future := strconv.FormatUint(n+1_000_000, 10)
	if a, err := nodeconn.XactStatus(ctx, pools, owner(primary), future); err != nil || a.Status != nodeconn.XactFuture {
		t.Errorf("a primary of an id it never gave out: %+v, %v; want %q", a, err, nodeconn.XactFuture)
	}
	// The standby has not replayed the commit.
	if a, err := nodeconn.XactStatus(ctx, pools, owner(standby), xid); err == nil {
		t.Errorf("a standby of a committed transaction it has not replayed: %+v; want an error, to ask again", a)
	}
}
