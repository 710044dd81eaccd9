package move

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
)

// refuseRelation refuses a relation that a move cannot carry; the reason names it.
func refuseRelation(r relationRow, p Payload) error {
	name := r.display()
	switch {
	case r.InExtension:
		return refusal("%s belongs to an extension, which a move does not carry", name)
	case r.Kind == "f":
		return refusal("%s is a foreign table, which a move does not support", name)
	case r.Kind == "m":
		return refusal("%s is a materialized view, which a move does not support", name)
	case r.Kind != "r" && r.Kind != "p":
		return nil // views, sequences, indexes, composite types: checked elsewhere or carried by pg_dump
	case r.Persistence == "u":
		return refusal("%s is an unlogged table, which logical replication cannot carry", name)
	case r.Persistence == "t":
		return refusal("%s is a temporary table", name)
	case r.HasRules:
		return refusal("%s has rules, which a move does not support", name)
	case r.RowSecurity:
		// The copy and the counts would see only the rows the policies show the owner, and
		// the source, with the others, would be dropped.
		return refusal("%s has row-level security that applies to the owner (FORCE ROW LEVEL SECURITY, or a table of another role): "+
			"the move would miss the rows its policies hide; move it as a role that bypasses them, or ALTER TABLE ... NO FORCE ROW LEVEL SECURITY", name)
	case r.Inherits:
		return refusal("%s uses table inheritance (not partitioning), which a move does not support", name)
	case !r.HasKey && r.Kind == "r":
		return refusal("table %s has no primary key or replica identity index, which a move needs to apply changes", name)
	case p.Schema != "" && r.Schema != p.Schema:
		return refusal("%s is a partition of a table of schema %s but lives in schema %s: move both schemas' tables with --table",
			name, displayName(p.Schema), displayName(r.Schema))
	}
	return nil
}

// dependenciesSQL finds what ties the moved tables to objects that stay: views and foreign
// keys across the boundary in either direction, and, for a schema, views in it that read
// tables of other schemas. $1 are the moved tables' oids, $2 the moved schema (or NULL).
const dependenciesSQL = `
	WITH moved AS (SELECT pg_catalog.unnest($1::pg_catalog.oid[]) AS oid),
	views AS (
		SELECT DISTINCT r.ev_class AS view, d.refobjid AS tbl
		FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
		WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
		  AND r.ev_class <> d.refobjid
	)
	SELECT 'view ' || v.view::pg_catalog.regclass::pg_catalog.text || ' depends on moved table ' || v.tbl::pg_catalog.regclass::pg_catalog.text
	FROM views v JOIN pg_catalog.pg_class c ON c.oid = v.view JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE v.tbl IN (SELECT oid FROM moved) AND ($2::pg_catalog.text IS NULL OR n.nspname <> $2::pg_catalog.text)
	UNION ALL
	SELECT 'view ' || v.view::pg_catalog.regclass::pg_catalog.text || ' of the moved schema depends on ' ||
	       v.tbl::pg_catalog.regclass::pg_catalog.text || ', which stays'
	FROM views v JOIN pg_catalog.pg_class c ON c.oid = v.view JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_catalog.pg_class t ON t.oid = v.tbl JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
	WHERE $2::pg_catalog.text IS NOT NULL AND n.nspname = $2::pg_catalog.text AND tn.nspname <> $2::pg_catalog.text
	  AND tn.nspname NOT IN ('pg_catalog', 'information_schema')
	UNION ALL
	SELECT 'foreign key ' || k.conname::pg_catalog.text || ' of ' || k.conrelid::pg_catalog.regclass::pg_catalog.text ||
	       ' references ' || k.confrelid::pg_catalog.regclass::pg_catalog.text || ' across the move'
	FROM pg_catalog.pg_constraint k
	WHERE k.contype = 'f' AND ((k.conrelid IN (SELECT oid FROM moved)) <> (k.confrelid IN (SELECT oid FROM moved)))
	ORDER BY 1 LIMIT 1`

// refuseDependencies refuses a move that would cut views or foreign keys in two.
func refuseDependencies(ctx context.Context, conn *pgx.Conn, pl *plan, p Payload) error {
	oids := make([]uint32, len(pl.tables))
	for i, r := range pl.tables {
		oids[i] = r.OID
	}
	var schema *string
	if p.Schema != "" {
		schema = &p.Schema
	}
	var why string
	err := conn.QueryRow(ctx, dependenciesSQL, oids, schema).Scan(&why)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return refusal("%s, which a move cannot carry", why)
}

// targetTaken refuses a target that already has what the move would create.
func targetTaken(ctx context.Context, conn *pgx.Conn, pl *plan, p Payload, node string) error {
	if p.Schema != "" {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1::pg_catalog.text)`,
			p.Schema).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return refusal("the target (node %s) already has schema %s", node, displayName(p.Schema))
		}
		return nil
	}
	names := make([]string, len(pl.tables))
	for i, r := range pl.tables {
		names[i] = r.ident()
	}
	var taken []string
	rows, _ := conn.Query(ctx, `SELECT r FROM pg_catalog.unnest($1::pg_catalog.text[]) r WHERE pg_catalog.to_regclass(r) IS NOT NULL`, names)
	taken, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(taken) > 0 {
		return refusal("the target (node %s) already has %s", node, strings.Join(taken, ", "))
	}
	return nil
}

// othersCodeSQL finds code that writing rows into the moved tables runs, in the writer's
// session, and that belongs to a role that is not a member of the session's user (the move's
// owner): functions and operators called by the tables' CHECK constraints and generated
// columns, and by the constraints of the domains their columns use
// (at any depth: domains over domains, arrays, composite and range types), and the functions
// of casts from text to those types. Copying rows into
// the target and applying changes there would run that code as the owner, with the owner's
// rights: a role could plant it (in a domain of its own, or in a table it owns in a shared
// schema) to act as a more privileged owner. $1 are the tables, qualified and quoted.
const othersCodeSQL = `
	WITH RECURSIVE tbl AS (
		SELECT pg_catalog.to_regclass(t)::pg_catalog.oid AS oid FROM pg_catalog.unnest($1::pg_catalog.text[]) t
	), types AS (
		SELECT a.atttypid AS oid FROM pg_catalog.pg_attribute a
		WHERE a.attrelid IN (SELECT oid FROM tbl) AND a.attnum > 0 AND NOT a.attisdropped
		UNION
		SELECT x.oid FROM types ty JOIN pg_catalog.pg_type t ON t.oid = ty.oid
		CROSS JOIN LATERAL (
			SELECT t.typbasetype UNION ALL SELECT t.typelem
			UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a
				WHERE a.attrelid = t.typrelid AND t.typrelid <> 0 AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = t.oid
		) x(oid) WHERE x.oid <> 0
	), holders AS (
		SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid AS classid, k.oid AS objid
		FROM pg_catalog.pg_constraint k
		WHERE (k.conrelid IN (SELECT oid FROM tbl) AND k.contype OPERATOR(pg_catalog.=) 'c')
		   OR k.contypid IN (SELECT oid FROM types)
		UNION ALL
		-- Generated columns only: the copy and catch-up give every other column, so defaults
		-- never run, and row security that applies to the owner is refused (refuseRelation).
		SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass::pg_catalog.oid, d.oid FROM pg_catalog.pg_attrdef d
		JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
		WHERE d.adrelid IN (SELECT oid FROM tbl) AND a.attgenerated <> ''
	), code AS (
		SELECT d.classid, d.objid, d.refclassid, d.refobjid, p.proowner AS owner
		FROM pg_catalog.pg_depend d JOIN holders h ON d.classid = h.classid AND d.objid = h.objid
		JOIN pg_catalog.pg_proc p ON d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid AND p.oid = d.refobjid
		UNION ALL
		SELECT d.classid, d.objid, d.refclassid, d.refobjid, o.oprowner
		FROM pg_catalog.pg_depend d JOIN holders h ON d.classid = h.classid AND d.objid = h.objid
		JOIN pg_catalog.pg_operator o ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid AND o.oid = d.refobjid
		UNION ALL
		SELECT d.classid, d.objid, 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid, p.proowner
		FROM pg_catalog.pg_depend d JOIN holders h ON d.classid = h.classid AND d.objid = h.objid
		JOIN pg_catalog.pg_operator o ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid AND o.oid = d.refobjid
		JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode::pg_catalog.oid
		UNION ALL
		-- Catch-up sends each value as text, cast to its column's type (package logicalapply).
		SELECT 'pg_catalog.pg_cast'::pg_catalog.regclass::pg_catalog.oid, k.oid,
		       'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid, p.oid, p.proowner
		FROM pg_catalog.pg_cast k JOIN pg_catalog.pg_proc p ON p.oid = k.castfunc
		WHERE k.castsource = 'pg_catalog.text'::pg_catalog.regtype::pg_catalog.oid AND k.casttarget IN (SELECT oid FROM types)
	)
	SELECT pg_catalog.pg_describe_object(c.classid, c.objid, 0) OPERATOR(pg_catalog.||) ' calls ' OPERATOR(pg_catalog.||)
	       pg_catalog.pg_describe_object(c.refclassid, c.refobjid, 0) OPERATOR(pg_catalog.||) ' of role ' OPERATOR(pg_catalog.||)
	       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.owner)::pg_catalog.text)
	FROM code c WHERE NOT pg_catalog.pg_has_role(c.owner, SESSION_USER, 'MEMBER')
	ORDER BY 1 LIMIT 1`

// refuseOthersCode refuses, on the target once its structure is created and before a row is
// written there, a move whose writes would run another role's code as the owner (see
// othersCodeSQL).
func refuseOthersCode(ctx context.Context, conn *pgx.Conn, pl *plan) error {
	names := make([]string, len(pl.tables))
	for i, r := range pl.tables {
		names[i] = r.ident()
	}
	var why string
	err := conn.QueryRow(ctx, othersCodeSQL, names).Scan(&why)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return refusal("on the target, %s, which is not a member of the move's owner: writing the rows would run it as the owner", why)
}
