package export_test

import (
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// sharedPrefix is the setup of the forced-export tests: two submitters, alice and bob, who
// export under one prefix of export_destinations they share, and a worker.
type sharedPrefix struct {
	env *testenv.Env
	db  string // node n1's database: facts (both may read and update it), forged (bob's)
	// dest is alice's destination under the shared prefix, manifest the path of the manifest
	// an export there commits.
	dest, manifest string
	asAlice, asBob *engine.Client
}

// aliceAndBobShareAPrefix makes a catalog with node n1 (single) whose export_destinations is
// one prefix, file://<temp>/shared, for alice and bob alike. Bob also owns table forged, one
// row of his choosing (666), to export over alice's.
func aliceAndBobShareAPrefix(t *testing.T) *sharedPrefix {
	t.Helper()
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
	s := &sharedPrefix{env: e, db: db,
		dest:     "file://" + base + "/shared/alice/facts",
		manifest: filepath.Join(base, "shared", "alice", "facts", export.ManifestKey),
		asAlice:  clientAs(t, e, alice, export.Feature()),
		asBob:    clientAs(t, e, bob, export.Feature()),
	}
	e.Worker(engine.Config{})
	return s
}

// clientAs is a client of e's catalog that connects as role.
func clientAs(t *testing.T, e *testenv.Env, role string, features ...engine.Feature) *engine.Client {
	t.Helper()
	c, err := engine.Open(ctx, e.Cluster.DSN(e.DB, role), features...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
