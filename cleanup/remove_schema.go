package cleanup

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// schemaOutsideDependentsSQL lists what, outside schema $1, depends on an object in it: what
// DROP SCHEMA CASCADE would drop beyond the schema (a view of another schema on one of its
// tables, a foreign key from another schema's table, a function using one of its types). Kinds of
// dependent it cannot place in a schema count as outside, except publications' memberships.
// Owner sessions have the search_path SafeSearchPath: operators are pg_catalog's.
const schemaOutsideDependentsSQL = `
	WITH ns AS (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1::pg_catalog.text),
	inside AS (
		SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid AS classid, c.oid AS objid
		FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
		UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid
		FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
		UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass::pg_catalog.oid, t.oid
		FROM pg_catalog.pg_type t WHERE t.typnamespace = (SELECT oid FROM ns)
	), dependents AS (
		SELECT DISTINCT d.classid, d.objid FROM pg_catalog.pg_depend d
		JOIN inside i ON d.refclassid = i.classid AND d.refobjid = i.objid
		WHERE d.deptype IN ('n', 'a')
	)
	SELECT pg_catalog.pg_describe_object(d.classid, d.objid, 0) FROM dependents d
	WHERE d.classid NOT IN ('pg_catalog.pg_publication_rel'::pg_catalog.regclass::pg_catalog.oid,
	                        'pg_catalog.pg_publication_namespace'::pg_catalog.regclass::pg_catalog.oid)
	  AND (CASE d.classid
		WHEN 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = d.objid)
		WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT p.pronamespace FROM pg_catalog.pg_proc p WHERE p.oid = d.objid)
		WHEN 'pg_catalog.pg_type'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT t.typnamespace FROM pg_catalog.pg_type t WHERE t.oid = d.objid)
		WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT c.relnamespace FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class WHERE r.oid = d.objid)
		WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT coalesce(c.relnamespace, k.connamespace) FROM pg_catalog.pg_constraint k
			 LEFT JOIN pg_catalog.pg_class c ON c.oid = k.conrelid WHERE k.oid = d.objid)
		WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT c.relnamespace FROM pg_catalog.pg_trigger g JOIN pg_catalog.pg_class c ON c.oid = g.tgrelid WHERE g.oid = d.objid)
		WHEN 'pg_catalog.pg_attrdef'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT c.relnamespace FROM pg_catalog.pg_attrdef a JOIN pg_catalog.pg_class c ON c.oid = a.adrelid WHERE a.oid = d.objid)
		WHEN 'pg_catalog.pg_policy'::pg_catalog.regclass::pg_catalog.oid THEN
			(SELECT c.relnamespace FROM pg_catalog.pg_policy y JOIN pg_catalog.pg_class c ON c.oid = y.polrelid WHERE y.oid = d.objid)
		END) IS DISTINCT FROM (SELECT oid FROM ns)
	ORDER BY 1 LIMIT 10`

// schemaBusySQL reports whether another session holds or waits for a lock on a relation of schema $1.
const schemaBusySQL = `
	SELECT EXISTS (
		SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_class c ON c.oid = l.relation
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE l.locktype = 'relation' AND n.nspname = $1::pg_catalog.text
		  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
		  AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid())`

// dropSchemaCascade drops a schema with everything in it, unless something outside it depends
// on it (that would be dropped too: the record fails, for an operator to decide) or a session
// uses one of its relations (it waits, like a table in use).
func dropSchemaCascade(ctx context.Context, conn *pgx.Conn, name string, lockTimeout time.Duration) error {
	rows, _ := conn.Query(ctx, schemaOutsideDependentsSQL, name)
	outside, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(outside) > 0 {
		return taskerr.Permanent(fmt.Errorf("objects outside schema %s depend on it (%s): drop them or the schema by hand, then `deckhand cleanup forget`",
			pgx.Identifier{name}.Sanitize(), strings.Join(outside, "; ")))
	}
	var busy bool
	if err := conn.QueryRow(ctx, schemaBusySQL, name).Scan(&busy); err != nil {
		return err
	}
	if busy {
		return errRelationBusy
	}
	return DropInTx(ctx, conn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE", lockTimeout)
}
