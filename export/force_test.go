package export_test

import (
	"errors"
	"os"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Under a prefix of export_destinations that several submitters share, --force must not let
// one replace another's export: a forced export supersedes whatever the destination held, and
// readers trust the manifest found there. Only who may act on the export there already (its
// submitter, a member of every role it ran as, an admin) may force a new one over it.
func TestAttackForcedExportReplacesAnotherSubmittersExport(t *testing.T) {
	p := aliceAndBobShareAPrefix(t)
	e, dest, asAlice, asBob := p.env, p.dest, p.asAlice, p.asBob
	x, err := export.Start(ctx, asAlice, export.Request{Table: "facts", Group: "n1", To: dest})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
	before, err := os.ReadFile(p.manifest)
	if err != nil {
		t.Fatal(err)
	}

	_, err = export.Start(ctx, asBob, export.Request{Table: "forged", Group: "n1", To: dest, Force: true})
	if !errors.Is(err, catalog.ErrForbidden) {
		t.Errorf("bob's forced export over alice's: err = %v, want a refusal", err)
	}
	if got, err := asAlice.Catalog().Export(ctx, x.ID); err != nil || got.State != "committed" {
		t.Errorf("alice's export after bob's attempt: %+v, %v", got, err)
	}
	if after, err := os.ReadFile(p.manifest); err != nil || string(after) != string(before) {
		t.Errorf("alice's manifest was replaced (err %v)", err)
	}
	// Alice herself may force a new export there, and an admin may.
	again, err := export.Start(ctx, asAlice, export.Request{Table: "facts", Group: "n1", To: dest, Force: true})
	if err != nil {
		t.Fatalf("alice's forced export over her own: %v", err)
	}
	waitJob(t, e, again.JobID, deckhandtype.JobFinished)
	admins, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: dest, Force: true})
	if err != nil {
		t.Fatalf("an admin's forced export: %v", err)
	}
	waitJob(t, e, admins.JobID, deckhandtype.JobFinished)
}
