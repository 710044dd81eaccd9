package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// trojans are look-alikes of pg_catalog functions and operators that deckhand's own
// statements use, planted in the public schema by a low-privilege role. Each matches a call
// at least as well as pg_catalog's own: exactly where pg_catalog's needs a cast, or with the
// same argument types, which wins when a search_path lists public before pg_catalog. Called
// by a superuser, any of them makes the intruder (INTRUDER) a superuser; every call, even one
// in a transaction that is rolled back, advances public.trojan_hits.
const trojans = `
CREATE SEQUENCE public.trojan_hits;
GRANT USAGE ON SEQUENCE public.trojan_hits TO PUBLIC;
CREATE FUNCTION public.trojan() RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
	PERFORM pg_catalog.nextval('public.trojan_hits'::pg_catalog.regclass);
	BEGIN
		EXECUTE 'ALTER ROLE INTRUDER SUPERUSER';
	EXCEPTION WHEN insufficient_privilege THEN NULL;
	END;
END $f$;
CREATE FUNCTION public.pg_has_role(text, name, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_has_role($1::pg_catalog.name, $2, $3); END $f$;
CREATE FUNCTION public.pg_has_role(text, text, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_has_role($1::pg_catalog.name, $2::pg_catalog.name, $3); END $f$;
CREATE FUNCTION public.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_has_role($1, $2, $3); END $f$;
CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.set_config($1, $2, $3); END $f$;
CREATE FUNCTION public.pg_terminate_backend(integer, integer) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_terminate_backend($1, $2::pg_catalog.int8); END $f$;
CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.to_regclass($1); END $f$;
CREATE FUNCTION public.current_database() RETURNS name LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.current_database(); END $f$;
CREATE FUNCTION public.pg_backend_pid() RETURNS integer LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_backend_pid(); END $f$;
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN QUERY SELECT pg_catalog.unnest($1); END $f$;
CREATE FUNCTION public.format_type(oid, integer) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.format_type($1, $2); END $f$;
CREATE FUNCTION public.pg_drop_replication_slot(text) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); PERFORM pg_catalog.pg_drop_replication_slot($1::pg_catalog.name); END $f$;
CREATE FUNCTION public.pg_current_wal_insert_lsn() RETURNS pg_lsn LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.pg_current_wal_insert_lsn(); END $f$;
CREATE FUNCTION public.trojan_oideq(oid, oid) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $f$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = public.trojan_oideq);
CREATE FUNCTION public.trojan_texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $f$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.trojan_texteq);
`

// PlantTrojans lets intruder, a role with no other privilege, create objects in db's public
// schema on cluster c, and plants the trojans there connected as intruder.
func PlantTrojans(t testing.TB, c *pgcluster.Cluster, db, intruder string) {
	t.Helper()
	id := pgx.Identifier{intruder}.Sanitize()
	if err := c.Exec(context.Background(), db, `GRANT CREATE ON SCHEMA public TO `+id); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, c.DSN(db, intruder))
	if _, err := conn.Exec(context.Background(), strings.ReplaceAll(trojans, "INTRUDER", strings.ReplaceAll(id, "'", "''"))); err != nil {
		t.Fatalf("planting trojans as %s: %v", intruder, err)
	}
}

// NoTrojanRan fails the test if any trojan in db was called, or intruder became a superuser.
func NoTrojanRan(t testing.TB, c *pgcluster.Cluster, db, intruder string) {
	t.Helper()
	conn := pgtest.Connect(t, c.DSN(db, pgcluster.Superuser))
	var super bool
	if err := conn.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, intruder).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Errorf("%s became a superuser: a trojan ran with deckhand's privileges", intruder)
	}
	var hits int64
	var called bool
	if err := conn.QueryRow(context.Background(), `SELECT last_value, is_called FROM public.trojan_hits`).Scan(&hits, &called); err != nil {
		t.Fatal(err)
	}
	if called {
		t.Errorf("trojans in %s were called %d times", db, hits)
	}
}
