package catalog_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// emptyCatalog opens a new database of the shared cluster as the superuser, with no schema yet.
func emptyCatalog(t testing.TB) (*catalog.Catalog, *pgcluster.Cluster, string) {
	t.Helper()
	cl := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	cat, err := catalog.Open(context.Background(), cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	return cat, cl, db
}

// migratedCatalog opens a new database of the shared cluster as the superuser, with the
// newest schema.
func migratedCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	cat, _, _ := emptyCatalog(t)
	if _, err := cat.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cat
}

// execOn runs statements on cat's pool, failing the test on the first error.
func execOn(t *testing.T, cat *catalog.Catalog) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		if _, err := cat.Pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func TestMigrateIsIdempotentAndVersioned(t *testing.T) {
	ctx := context.Background()
	cat, _, _ := emptyCatalog(t)

	if err := cat.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "deckhand init") {
		t.Fatalf("uninitialised catalog: err = %v, want advice to run deckhand init", err)
	}
	// Build the first version of the schema, then upgrade it to the newest.
	first, err := cat.MigrateTo(ctx, 1)
	if err != nil || len(first) != 1 || first[0] != 1 {
		t.Fatalf("migrate to 1 applied %v (err %v)", first, err)
	}
	applied, err := cat.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 || applied[0] <= 1 || applied[len(applied)-1] != catalog.SchemaVersion() {
		t.Fatalf("upgrade applied %v, want the versions after 1 up to %d", applied, catalog.SchemaVersion())
	}
	again, err := cat.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second migrate applied %v (err %v), want nothing", again, err)
	}
	if err := cat.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}

	// A catalog written by a newer deckhand is refused rather than half understood.
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.schema_migration (version, name) VALUES ($1, 'from the future')`,
		catalog.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "newer than this deckhand") {
		t.Fatalf("migrating a newer catalog: err = %v, want a refusal", err)
	}
}

// Concurrent `deckhand init` runs serialize on the version table's lock instead of failing.
func TestConcurrentMigrate(t *testing.T) {
	ctx := context.Background()
	cl := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			cat, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser))
			if err != nil {
				errs <- err
				return
			}
			defer cat.Close()
			_, err = cat.Migrate(ctx)
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// The catalog is reached by conninfo in either form; a URL's parameters (pgx's and the
// server's) are honoured, and the catalog's own session settings added to them.
func TestOpenTakesAURL(t *testing.T) {
	cl := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	u, err := url.Parse(cl.URL(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	// Conninfo URLs percent-encode (a "+" stays a "+"), so url.Values.Encode will not do.
	u.RawQuery += "&pool_max_conns=3&application_name=" + url.PathEscape("url probe")
	cat, err := catalog.Open(context.Background(), u.String())
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	defer cat.Close()
	var database, app, planCache string
	err = cat.Pool.QueryRow(context.Background(),
		`SELECT current_database(), current_setting('application_name'), current_setting('plan_cache_mode')`).Scan(&database, &app, &planCache)
	if err != nil || database != db || app != "url probe" || planCache != "force_generic_plan" || cat.Pool.Config().MaxConns != 3 {
		t.Errorf("URL catalog: database %q, application_name %q, plan_cache_mode %q, %d connections (%v)",
			database, app, planCache, cat.Pool.Config().MaxConns, err)
	}
}
