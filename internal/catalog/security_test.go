package catalog_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The catalog's privileges keep to the trust model, for every table and function a migration
// creates, now and later: nobody but workers may write a table (neither by grant nor, should
// someone grant it by mistake, in fact: every table has the guard trigger); functions are not
// executable by PUBLIC; every SECURITY DEFINER function pins its search_path.
func TestCatalogPrivilegesKeepToTheTrustModel(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	check := func(what, query string) {
		t.Helper()
		rows, _ := cat.Pool.Query(ctx, query)
		bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("%s: %s", what, b)
		}
	}
	check("writable by a role other than deckhand_worker", `
		SELECT c.relname || ': ' || p.privilege_type || ' for ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
		CROSS JOIN LATERAL (SELECT a.privilege_type) p
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p', 'v', 'S')
		  AND a.grantee <> c.relowner
		  AND (a.grantee = 0 OR a.grantee::regrole::text <> 'deckhand_worker')
		  AND p.privilege_type NOT IN ('SELECT', 'USAGE')`)
	check("readable base table for submitters", `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p')
		  AND has_table_privilege('deckhand_submitter', c.oid, 'SELECT')
		  AND c.relname NOT IN ('schema_migration', 'task_kind')`)
	check("table without the write guard", `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p')
		  AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'guard_writes')`)
	// Before every statement that writes (tgtype 62: BEFORE, INSERT, DELETE, UPDATE, TRUNCATE,
	// for each statement), and only for roles that are not workers (0030_guard_when.sql).
	check("write guard that misses some writes or calls its function for workers too", `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_trigger g ON g.tgrelid = c.oid AND g.tgname = 'guard_writes'
		WHERE n.nspname = 'deckhand' AND (g.tgtype <> 62 OR g.tgqual IS NULL
		  OR pg_get_triggerdef(g.oid) NOT LIKE '%WHEN ((NOT pg_has_role(CURRENT_USER, (''deckhand_worker''::text)::name, ''MEMBER''::text)))%')`)
	check("function executable by PUBLIC", `
		SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'deckhand' AND EXISTS (
			SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
			WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')`)
	check("SECURITY DEFINER function without search_path = pg_catalog, pg_temp", `
		SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'deckhand' AND p.prosecdef
		  AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)`)
	check("table not fully writable by deckhand_worker", `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p')
		  AND NOT has_table_privilege('deckhand_worker', c.oid, 'SELECT, INSERT, UPDATE, DELETE')`)
}

// deckhand init creates the catalog roles once per cluster; inits of several catalogs of one
// cluster at the same moment all succeed, and an init run again changes nothing.
func TestInitCreatesRolesOnceAndConcurrently(t *testing.T) {
	ctx := context.Background()
	cl := pgtest.Shared(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		db := pgtest.NewDatabase(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cat, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser))
			if err != nil {
				errs <- err
				return
			}
			defer cat.Close()
			if _, err := cat.Migrate(ctx); err != nil {
				errs <- err
				return
			}
			_, err = cat.Migrate(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	conn, err := cl.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var roles int
	var canLogin, adminSubmits bool
	err = conn.QueryRow(ctx, `SELECT count(*), bool_or(rolcanlogin), pg_has_role('deckhand_admin', 'deckhand_submitter', 'MEMBER')
		FROM pg_roles WHERE rolname IN ('deckhand_submitter', 'deckhand_admin', 'deckhand_worker')`).Scan(&roles, &canLogin, &adminSubmits)
	if err != nil || roles != 3 || canLogin || !adminSubmits {
		t.Errorf("roles: %d, any can log in: %v, admins are submitters: %v (%v)", roles, canLogin, adminSubmits, err)
	}
}

// An operator of an earlier version may have granted table privileges to submitters directly;
// the upgrade takes them back, so that nobody reads around the views or writes past the functions.
func TestUpgradeRevokesDirectTablePrivileges(t *testing.T) {
	ctx := context.Background()
	cat, cl, db := emptyCatalog(t)
	if _, err := cat.MigrateTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	role := "old_submitter_" + db
	if err := pgtest.CreateLoginRole(ctx, cl, role, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	}) //nolint:errcheck
	q := pgx.Identifier{role}.Sanitize()
	if err := cl.Exec(ctx, db, `GRANT USAGE ON SCHEMA deckhand TO `+q+`; GRANT ALL ON ALL TABLES IN SCHEMA deckhand TO `+q+`;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA deckhand TO `+q); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _ := cat.Pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'v', 'S')
		  AND (has_table_privilege($1, c.oid, 'SELECT') OR (c.relkind <> 'S' AND has_table_privilege($1, c.oid, 'INSERT')))`, role)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) != 0 {
		t.Errorf("after the upgrade %s still reaches %v (%v)", role, left, err)
	}
}
