package move_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A move job whose submitter was forged in the catalog (see testenv.Env.ForgeSubmitter) is
// refused, and changes nothing: the worker re-checks that the submitter is a member of the
// owner in both of a move's sessions, each on its own node. Here the forged submitter is a
// member of the owner on the source's server but not on the target's, then on neither.
func TestForgedMoveIsRefused(t *testing.T) {
	t.Parallel()
	e := testenv.NewProxied(t, testenv.LogicalCluster(t), move.Feature())
	src := e.Node("src")
	dst := e.AddNode("dst", 8) // on the shared cluster: another server, with roles of its own
	e.NodeExec(src, `CREATE SCHEMA app; CREATE TABLE app.orders (id bigint PRIMARY KEY, note text);
		INSERT INTO app.orders SELECT g, 'x' FROM generate_series(1, 100) g`)
	preSrc := e.Snapshot(src, "app.orders")
	// Roles exist per server: the forgers are created on both, and one is made a member of the
	// owner (the superuser, as moves need on PostgreSQL 15) on the source's server only.
	name := func(p string) string { return fmt.Sprintf("%s_%d_%d", p, os.Getpid(), time.Now().UnixNano()%1e9) }
	memberOnSource, outsider := name("forger"), name("outsider")
	for _, c := range []*pgcluster.Cluster{e.NodeCluster, e.Cluster} {
		for _, r := range []string{memberOnSource, outsider} {
			if err := c.CreateRole(ctx, r, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
			})
		}
	}
	e.NodeExec("postgres", `GRANT `+pgx.Identifier{pgcluster.Superuser}.Sanitize()+` TO `+pgx.Identifier{memberOnSource}.Sanitize())

	refusedOn := map[int64]string{}
	for _, tc := range []struct{ submitter, node string }{{memberOnSource, "dst"}, {outsider, "src"}} {
		id := e.Submit(&spec.Job{Tasks: []spec.Task{{Name: "move", Kind: move.KindMoveTable, Node: "src", MaxAttempts: 1,
			Payload: testenv.Payload(t, move.MovePayload{Table: "app.orders", To: "dst"})}}})
		e.ForgeSubmitter(id, tc.submitter)
		refusedOn[id] = fmt.Sprintf("submitter %q is not a member of role %q on node %s", tc.submitter, pgcluster.Superuser, tc.node)
	}
	e.WorkerWith([]engine.Feature{moveKind(e.Env, false)})
	for id, refusal := range refusedOn {
		e.FailedWith(id, refusal)
		if recs := e.Records(id); len(recs) != 0 {
			t.Errorf("the refused move registered resources: %+v", recs)
		}
	}
	if d := testenv.Diff(preSrc, e.Snapshot(src, "app.orders")); d != "" {
		t.Errorf("the refused moves changed the source:\n%s", d)
	}
	var schemas int
	if err := e.Pool(dst).QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'app'`).Scan(&schemas); err != nil || schemas != 0 {
		t.Errorf("the refused moves created schema app on the target (%d, %v)", schemas, err)
	}
}
