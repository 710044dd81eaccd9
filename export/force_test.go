package export_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Under a prefix of export_destinations that several submitters share, --force must not let
// one replace another's export: a forced export supersedes whatever the destination held, and
// readers trust the manifest found there. Only who may act on the export there already (its
// submitter, a member of every role it ran as, an admin) may force a new one over it.
func TestAttackForcedExportReplacesAnotherSubmittersExport(t *testing.T) {
	e, db := single(t)
	alice, bob := e.Role("alice"), e.Role("bob")
	for _, r := range []string{alice, bob} {
		q := pgx.Identifier{r}.Sanitize()
		e.Exec("postgres", `GRANT deckhand_submitter TO `+q)
		e.Exec(db, `GRANT SELECT, UPDATE ON facts TO `+q)
	}
	e.Exec(db, `CREATE TABLE forged (id bigint NOT NULL); INSERT INTO forged VALUES (666);
		GRANT SELECT, UPDATE ON forged TO `+pgx.Identifier{bob}.Sanitize())
	base := t.TempDir()
	if err := e.Client.SetSetting(ctx, "export_destinations", "file://"+base+"/shared"); err != nil {
		t.Fatal(err)
	}
	open := func(role string) *engine.Client {
		c, err := engine.Open(ctx, e.Cluster.DSN(e.DB, role), export.Feature())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	asAlice, asBob := open(alice), open(bob)
	e.Worker(engine.Config{})
	dest := "file://" + base + "/shared/alice/facts"
	x, err := export.Start(ctx, asAlice, export.Request{Table: "facts", Group: "n1", To: dest})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
	manifest := filepath.Join(base, "shared", "alice", "facts", export.ManifestKey)
	before, err := os.ReadFile(manifest)
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
	if after, err := os.ReadFile(manifest); err != nil || string(after) != string(before) {
		t.Errorf("alice's manifest was replaced (err %v)", err)
	}
	// Alice herself may force a new export there, and an admin may.
	again, err := export.Start(ctx, asAlice, export.Request{Table: "facts", Group: "n1", To: dest, Force: true})
	if err != nil {
		t.Fatalf("alice's forced export over her own: %v", err)
	}
	waitJob(t, e, again.JobID, deckhandtype.JobFinished)
	if _, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: dest, Force: true}); err != nil {
		t.Errorf("an admin's forced export: %v", err)
	}
}
