package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// node add of a registered node keeps what it is not given as the node has it when the
// update is made, not as it was read before: another admin's change of the group, committed
// while the command runs, is not undone by a node add that changes only the limit.
func TestNodeAddKeepsAConcurrentChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	db := pgtest.NewDatabase(t)
	dsn := e.Cluster.DSN(db, "postgres")
	want(t, e.run("node", "add", "n1", "--dsn", dsn, "--group", "g1", "--max-tasks", "2"), 0)

	// Another admin moves n1 to group g2, in a transaction still open.
	other, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx) //nolint:errcheck
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT deckhand.node_add('n1', $1, 'g2', 2)`, dsn); err != nil {
		t.Fatal(err)
	}

	done := make(chan result, 1)
	go func() {
		done <- deckhand(t, "", "--catalog", e.DSN, "node", "add", "n1", "--dsn", dsn, "--max-tasks", "7")
	}()
	// The command's update waits for the other admin's.
	testenv.Eventually(t, 20*time.Second, func() bool {
		var waiting bool
		err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE query LIKE '%node_add%' AND wait_event_type = 'Lock' AND pid <> $1)`, other.PgConn().PID()).Scan(&waiting)
		return err == nil && waiting
	}, "node add waiting for the other admin's update")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	want(t, r, 0)
	if !strings.Contains(r.stderr, "node n1 updated") {
		t.Errorf("node add of a registered node: %s", r)
	}
	for _, n := range decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")) {
		if n.Name == "n1" && (n.Group != "g2" || n.MaxTasks != 7) {
			t.Errorf("n1 = group %s, max tasks %d; want group g2 (the other admin's) and max tasks 7", n.Group, n.MaxTasks)
		}
	}
}
