package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

// Any submitter can label a job of its own "rebalance" (the spec's "kind" is a free label)
// and leave it unfinished (no worker claims it for a while, or it is paused). An admin, who
// sees every job, must not have `deckhand rebalance` refused for it, nor see it in `rebalance
// status`: a rebalance is held back by the caller's own unfinished rebalance only (the key's
// contract: "one rebalance of yours runs at a time").
func TestAttackRebalanceIsHeldBackByAnotherRolesLabel(t *testing.T) {
	e := newRebalanceEnv(t)
	mallory, _ := e.Submitter("mallory")
	spec := fmt.Sprintf(`{"kind": "rebalance", "description": "rebalance groups n1, n2, n3: 1 moves",
		"tasks": [{"name": "move-1", "node": "n1", "owner": %q, "sql": "SELECT pg_sleep(3600)"}]}`, mallory)
	r := deckhand(t, spec, "--catalog", e.RoleDSN(mallory), "job", "submit", "-")
	want(t, r, 0)
	forged := strings.TrimSpace(r.stdout)

	r = e.run("rebalance", "--groups", "n1,n2,n3")
	if r.code != 0 {
		t.Errorf("an admin's rebalance, with %s's job %s labelled rebalance unfinished: %s", mallory, forged, r)
	}
	r = e.run("rebalance", "status")
	if strings.Contains(r.stdout, "rebalance job "+forged) {
		t.Errorf("rebalance status shows %s's job %s as the latest rebalance:\n%s", mallory, forged, r.stdout)
	}
}
