package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

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
	// Each sees and controls its own by name; an admin reaches either as SUBMITTER/NAME.
	r = deckhand(t, "", "--catalog", e.RoleDSN(alice), "schedule", "show", "nightly-backup", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"submitted_by": "`+alice+`"`) {
		t.Errorf("alice's own schedule: %s", r)
	}
	want(t, e.run("schedule", "pause", mallory+"/nightly-backup"), 0)
	r = deckhand(t, "", "--catalog", e.RoleDSN(mallory), "schedule", "show", "nightly-backup", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"paused": true`) {
		t.Errorf("mallory's schedule, paused by an admin as %s/nightly-backup: %s", mallory, r)
	}
	r = deckhand(t, "", "--catalog", e.RoleDSN(alice), "schedule", "show", "nightly-backup", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"paused": false`) {
		t.Errorf("alice's schedule of the same name: %s", r)
	}
	if r := deckhand(t, "", "--catalog", e.RoleDSN(alice), "schedule", "remove", mallory+"/nightly-backup"); r.code == 0 {
		t.Errorf("alice removed mallory's schedule: %s", r)
	}
}
