//go:build attack

package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

// Open findings, kept out of the default build (go test -tags attack ./internal/cli/ -run TestAttack).

// Any submitter can label a job of its own "rebalance" (the spec's "kind" is a free label)
// and leave it unfinished (no worker claims it for a while, or it is paused): `deckhand
// rebalance` of an admin, who sees every job, is then refused (exit 4) with that job's id,
// and `rebalance status` shows the forged job as the latest rebalance. A rebalance should be
// held back by the caller's own unfinished rebalance only (the key's contract: "one rebalance
// of yours runs at a time"), and status should not show another role's label as a rebalance.
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

// Schedule names are one space for every submitter: a submitter that takes a name first
// ("nightly-backup") holds back every other role's schedule of that name for as long as it
// keeps its own, and the refusal ("already exists") tells of a schedule the caller may not
// see (`schedule show` says not found). Job keys were made per submitter for exactly this
// reason (docs/security.md, Job keys); schedule names should be too.
func TestAttackScheduleNamesCanBeSquatted(t *testing.T) {
	e := newEnv(t)
	e.AddNode("n1", 2)
	alice, _ := e.Submitter("alice")
	mallory, _ := e.Submitter("mallory")
	spec := func(owner string) string {
		return fmt.Sprintf(`{"tasks": [{"name": "a", "node": "n1", "owner": %q, "sql": "SELECT 1"}]}`, owner)
	}
	want(t, deckhand(t, spec(mallory), "--catalog", e.RoleDSN(mallory), "schedule", "add", "nightly-backup", "--every", "24h", "-"), 0)
	if r := deckhand(t, "", "--catalog", e.RoleDSN(alice), "schedule", "show", "nightly-backup"); r.code == 0 {
		t.Fatalf("alice sees mallory's schedule: %s", r)
	}
	r := deckhand(t, spec(alice), "--catalog", e.RoleDSN(alice), "schedule", "add", "nightly-backup", "--every", "24h", "-")
	if r.code != 0 {
		t.Errorf("alice's schedule nightly-backup, a name %s took first: %s", mallory, r)
	}
	if strings.Contains(r.stderr, "already exists") {
		t.Errorf("the refusal tells alice of a schedule she may not see: %s", r.stderr)
	}
}
