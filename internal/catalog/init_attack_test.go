package catalog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// A role that may create schemas in the catalog's database (CREATE on it, granted for some
// other purpose) makes the schema deckhand before the first init. Used as it is, the schema's
// owner would count as a catalog admin and could replace any of deckhand's functions, which
// workers call, with its own. Init refuses it, saying whose it is, and creates nothing in it.
func TestAttackSquattedSchemaIsRefused(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	squatter := "squatter_" + roleSuffix(db)
	initRoles(t, cl, "", []string{db}, squatter)
	if err := cl.Exec(ctx, db, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+pgx.Identifier{squatter}.Sanitize()+
		"; SET ROLE "+pgx.Identifier{squatter}.Sanitize()+"; CREATE SCHEMA deckhand"); err != nil {
		t.Fatal(err)
	}
	_, err := admin.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), squatter) || !strings.Contains(err.Error(), "owned by") {
		t.Fatalf("init over a schema made by %s: err = %v, want a refusal naming it", squatter, err)
	}
	var objects int
	if err := admin.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n
		ON n.oid = c.relnamespace WHERE n.nspname = 'deckhand'`).Scan(&objects); err != nil || objects != 0 {
		t.Fatalf("init created %d objects in the squatted schema (%v)", objects, err)
	}
}

// The catalog's schema belongs to the role that created it; run as another role, even a
// superuser, init would create objects, SECURITY DEFINER functions among them, of mixed
// owners. It refuses and names the role to run it as.
func TestInitAsAnotherRoleIsRefused(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	other := "other_init_" + roleSuffix(db)
	initRoles(t, cl, "SUPERUSER", nil, other)
	if _, err := admin.MigrateTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cl.DSN(db, other))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.Migrate(ctx); err == nil || !strings.Contains(err.Error(), pgcluster.Superuser) {
		t.Fatalf("init as %s of a catalog made by %s: err = %v, want a refusal naming %s", other, pgcluster.Superuser, err, pgcluster.Superuser)
	}
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatalf("init as the catalog's owner: %v", err)
	}
}

// Any role that may connect to the catalog's database may take any advisory lock. Holding
// the one an earlier init serialized on, it stopped every init and upgrade for as long as it
// liked. Inits serialize on the migration table's lock now, which only the catalog's owner
// and workers may take.
func TestAttackHeldAdvisoryLockBlocksNoInit(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.MigrateTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	holder := "lockholder_" + roleSuffix(db)
	initRoles(t, cl, "", nil, holder)
	conn, err := pgx.Connect(ctx, cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET SESSION AUTHORIZATION "+pgx.Identifier{holder}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// The key an earlier init used ("dkhnd"), and a transaction left open that read the
	// version table as any catalog role may.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(x'646b686e64'::bigint)`); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := admin.Migrate(wait); err != nil {
		t.Fatalf("init while %s holds the advisory lock: %v", holder, err)
	}
	if err := admin.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
}

// An administrator may make the catalog's schema for the role deckhand runs as (CREATE SCHEMA
// deckhand AUTHORIZATION ...) rather than let it create schemas in the database: that role's
// init builds in it and upgrades it, though it may not create schemas itself.
func TestInitInASchemaMadeForItsRole(t *testing.T) {
	_, cl, db := emptyCatalog(t)
	role := "schema_holder_" + roleSuffix(db)
	initRoles(t, cl, "CREATEROLE", []string{db}, role)
	if err := cl.Exec(ctx, db, "REVOKE CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC; "+
		"CREATE SCHEMA deckhand AUTHORIZATION "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cl.DSN(db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.MigrateTo(ctx, 1); err != nil {
		t.Fatalf("first init in a schema made for %s: %v", role, err)
	}
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatalf("upgrade in a schema made for %s: %v", role, err)
	}
	if err := cat.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
}

// A login whose name PostgreSQL quotes (capitals, a hyphen, a space) runs the first init and
// owns the schema it made; init compared the owner's name as regrole prints it, quoted, with
// the login's, and refused that login its own catalog. The same comparison let a role that
// may create schemas squat the catalog of a login named with double quotes: the squatter
// named Deck made the schema, and init as the login "Deck" (quotes part of its name), whose
// name is how regrole prints Deck, built the catalog in it.
func TestAttackInitComparesOwnersByName(t *testing.T) {
	_, cl, db := emptyCatalog(t)
	role := "Deckhand-Svc " + roleSuffix(db)
	squatter := "Deck" + roleSuffix(db)
	victim := `"` + squatter + `"`
	other := pgtest.NewDatabase(t)
	initRoles(t, cl, "CREATEROLE", []string{db, other}, role, squatter, victim)
	if err := cl.Exec(ctx, db, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cl.DSN(db, role))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.MigrateTo(ctx, 1); err != nil {
		t.Fatalf("first init as %s: %v", role, err)
	}
	if _, err := cat.MigrateTo(ctx, 1); err != nil {
		t.Fatalf("second init as %s, who made the schema: %v", role, err)
	}

	if err := cl.Exec(ctx, other, "GRANT CREATE ON DATABASE "+pgx.Identifier{other}.Sanitize()+" TO "+pgx.Identifier{squatter}.Sanitize()+
		"; SET ROLE "+pgx.Identifier{squatter}.Sanitize()+"; CREATE SCHEMA deckhand; "+
		"GRANT ALL ON SCHEMA deckhand TO "+pgx.Identifier{victim}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	v, err := catalog.Open(ctx, cl.DSN(other, victim))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.MigrateTo(ctx, 1); err == nil || !strings.Contains(err.Error(), "owned by") {
		t.Fatalf("init as %s over a schema made by %s: err = %v, want a refusal", victim, squatter, err)
	}
}

// initRoles creates login roles (attrs as CREATE ROLE takes them) for a test of init, and when
// the test ends removes them, what they own in each of dbs, and the schema deckhand there.
func initRoles(t *testing.T, cl *pgcluster.Cluster, attrs string, dbs []string, roles ...string) {
	t.Helper()
	for _, r := range roles {
		if err := pgtest.CreateLoginRole(ctx, cl, r, attrs); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		bg := context.Background()
		for _, d := range dbs {
			cl.Exec(bg, d, "DROP SCHEMA IF EXISTS deckhand CASCADE") //nolint:errcheck
		}
		for _, r := range roles {
			for _, d := range dbs {
				cl.Exec(bg, d, "DROP OWNED BY "+pgx.Identifier{r}.Sanitize()) //nolint:errcheck
			}
			cl.Exec(bg, "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize()) //nolint:errcheck
		}
	})
}
