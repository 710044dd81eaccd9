//go:build attack

package move_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// Open findings, kept out of the default build (go test -tags attack ./move/ -run TestAttack).

// Placements name a schema by its name alone, across every group. A tenant's schema billing
// lives on g1 and was never moved (no placement row). Another role, the owner of a schema
// also named billing in a database of its own (group g3), moves its billing from g3 to g2:
// the placement of "billing" — which routers use to send the first tenant's queries — now
// says g2, and the first tenant's own move of billing out of g1 is refused as placed
// elsewhere. A move should not place a schema name that another group holds (nor should a
// failed one leave it placed on its source, which BeginMove records before anything is copied).
func TestAttackMoveRedirectsAnotherTenantsPlacement(t *testing.T) {
	e := newMoveEnv(t)
	e.NodeExec(e.src, `CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int PRIMARY KEY); INSERT INTO billing.invoices VALUES (1)`)
	own := testenv.Database(t, e.NodeCluster, "own")
	e.NodeExec(own, "GRANT CREATE ON DATABASE "+own+" TO "+e.ownerIdent())
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "own", DSN: e.Proxy.DSN(own, pgcluster.Superuser), Group: "g3", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	e.asOwner(own, `CREATE SCHEMA billing; CREATE TABLE billing.x (id int PRIMARY KEY)`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "billing", From: "g3", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	t.Logf("the other role's move of its billing: %s %s", job.State, e.lastError(id))
	placements, err := e.Client.Catalog().Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range placements {
		if p.Schema == "billing" && p.Table == nil && p.Group != "g1" {
			t.Errorf("schema billing, which lives on g1, is placed on %s by job %d of another role", p.Group, id)
		}
	}
}
