package move

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// relation is a table of the move, as the source's catalog has it.
type relation struct {
	OID         uint32 `db:"oid"`
	Schema      string `db:"schema"`
	Name        string `db:"name"`
	Kind        string `db:"kind"` // r plain table or leaf partition, p partitioned table
	IsPartition bool   `db:"is_partition"`
}

func (r relation) ident() string { return pgx.Identifier{r.Schema, r.Name}.Sanitize() }

// display names the relation for people: parts quoted only where they need it.
func (r relation) display() string { return displayName(r.Schema, r.Name) }

// plainName is a name part that needs no quotes: it reads back as itself.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// displayName spells a qualified name as a person would write it: app.orders, "App".orders.
func displayName(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if plainName.MatchString(p) {
			out[i] = p
		} else {
			out[i] = pgx.Identifier{p}.Sanitize()
		}
	}
	return strings.Join(out, ".")
}

// plan is what a move moves, read from the source before anything is created.
type plan struct {
	schemas   []string   // schemas the moved tables are in (one for a schema move)
	tables    []relation // every table: plain, partitioned and leaves
	sequences []string   // qualified, quoted names of the sequences that move
	pkOIDs    []uint32   // primary key constraints: created before the copy
	fks       []foreignKey
	triggers  []uint32 // user triggers: created at the cut-over, so that they never fire for applied changes
}

// foreignKey is a foreign key constraint, added NOT VALID at the cut-over and validated after it.
type foreignKey struct {
	OID         uint32 `db:"oid"`
	Table       string `db:"tbl"` // qualified, quoted
	Name        string `db:"name"`
	Definition  string `db:"definition"`
	Partitioned bool   `db:"partitioned"` // PostgreSQL cannot add it NOT VALID
}

// copied are the tables whose rows are copied: plain tables and leaf partitions (a
// partitioned table holds no rows of its own).
func (p *plan) copied() []relation {
	var out []relation
	for _, r := range p.tables {
		if r.Kind == "r" {
			out = append(out, r)
		}
	}
	return out
}

// published are the tables the publication names: all but partitions, whose changes are
// published as their root's (publish_via_partition_root).
func (p *plan) published() []relation {
	var out []relation
	for _, r := range p.tables {
		if !r.IsPartition {
			out = append(out, r)
		}
	}
	return out
}

func (p *plan) locked() []string {
	out := make([]string, 0, len(p.tables))
	for _, r := range p.published() {
		out = append(out, r.ident())
	}
	return out
}

// objects are what the catalog's placements record for the move.
func (p Payload) objects() []deckhandtype.PlacedObject {
	if p.Schema != "" {
		return []deckhandtype.PlacedObject{{Schema: p.Schema}}
	}
	out := make([]deckhandtype.PlacedObject, len(p.Tables))
	for i, t := range p.Tables {
		out[i] = deckhandtype.PlacedObject{Schema: t[0], Table: t[1]}
	}
	return out
}

// refusal is a reason the move cannot be done, found before anything was created: the task
// fails at once with it, as one line.
func refusal(format string, args ...any) error {
	return taskerr.Permanent(fmt.Errorf(format, args...))
}

// relationsSQL lists the tables of the move: those of schema $1, or the tables $2 (and the
// partitions of the partitioned ones, at any depth), with what decides whether they can move.
const relationsSQL = `
	WITH RECURSIVE chosen AS (
		SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE ($1::pg_catalog.text IS NOT NULL AND n.nspname = $1::pg_catalog.text)
		   OR ($1::pg_catalog.text IS NULL AND (n.nspname, c.relname) IN (
		        SELECT t[1], t[2] FROM pg_catalog.jsonb_array_elements($2::pg_catalog.jsonb) e
		        CROSS JOIN LATERAL (SELECT ARRAY[e->>0, e->>1]) x(t)))
		UNION
		SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN chosen ch ON i.inhparent = ch.oid
	)
	SELECT c.oid::pg_catalog.int8 AS oid, n.nspname::pg_catalog.text AS schema, c.relname::pg_catalog.text AS name,
	       c.relkind::pg_catalog.text AS kind, c.relispartition AS is_partition, c.relpersistence::pg_catalog.text AS persistence,
	       c.relhasrules AS has_rules, c.relreplident::pg_catalog.text AS replident,
	       pg_catalog.row_security_active(c.oid) AS row_security,
	       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)) AS has_key,
	       (NOT c.relispartition AND EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid)
	        AND c.relkind <> 'p') AS inherits,
	       (SELECT i.inhparent::pg_catalog.int8 FROM pg_catalog.pg_inherits i WHERE c.relispartition AND i.inhrelid = c.oid) AS parent,
	       EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
	               AND d.objid = c.oid AND d.deptype = 'e') AS in_extension
	FROM chosen ch JOIN pg_catalog.pg_class c ON c.oid = ch.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	ORDER BY n.nspname, c.relname`

type relationRow struct {
	relation
	Persistence string `db:"persistence"`
	HasRules    bool   `db:"has_rules"`
	RowSecurity bool   `db:"row_security"` // the owner's reads of it are filtered by policies
	ReplIdent   string `db:"replident"`
	HasKey      bool   `db:"has_key"`
	Inherits    bool   `db:"inherits"`
	InExtension bool   `db:"in_extension"`
	Parent      *int64 `db:"parent"`
}

// inspect reads the plan of a move from the source and refuses what cannot move.
func inspect(ctx context.Context, conn *pgx.Conn, p Payload) (*plan, error) {
	var walLevel string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('wal_level'::pg_catalog.text)`).Scan(&walLevel); err != nil {
		return nil, err
	}
	if walLevel != "logical" {
		return nil, refusal("wal_level is %s on the source, and a move needs logical (set wal_level = logical and restart it)", walLevel)
	}
	var schema *string
	if p.Schema != "" {
		schema = &p.Schema
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1::pg_catalog.text)`,
			p.Schema).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, refusal("schema %s does not exist on the source", displayName(p.Schema))
		}
	}
	tables := p.Tables
	if tables == nil {
		tables = [][2]string{}
	}
	tablesJSON, err := json.Marshal(tables)
	if err != nil {
		return nil, err
	}
	rows, _ := conn.Query(ctx, relationsSQL, schema, string(tablesJSON))
	all, err := pgx.CollectRows(rows, pgx.RowToStructByName[relationRow])
	if err != nil {
		return nil, err
	}
	pl := &plan{}
	if p.Schema != "" {
		pl.schemas = []string{p.Schema}
	}
	found := map[[2]string]bool{}
	moved := map[int64]bool{}
	for _, r := range all {
		moved[int64(r.OID)] = true
	}
	for _, r := range all {
		if r.Parent != nil && !moved[*r.Parent] {
			return nil, refusal("%s is a partition of a table that is not moved: move its partitioned table", r.display())
		}
		found[[2]string{r.Schema, r.Name}] = true
		if err := refuseRelation(r, p); err != nil {
			return nil, err
		}
		if r.Kind == "r" || r.Kind == "p" {
			pl.tables = append(pl.tables, r.relation)
			if !slices.Contains(pl.schemas, r.Schema) {
				pl.schemas = append(pl.schemas, r.Schema)
			}
		}
	}
	for _, t := range p.Tables {
		if !found[t] {
			return nil, refusal("table %s does not exist on the source", displayName(t[0], t[1]))
		}
	}
	if len(pl.tables) == 0 {
		return nil, refusal("%s has no tables to move", p.What())
	}
	if err := refuseDependencies(ctx, conn, pl, p); err != nil {
		return nil, err
	}
	return pl, readConstraints(ctx, conn, pl, p)
}

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

// readConstraints reads the keys, foreign keys, triggers and sequences of the moved tables.
func readConstraints(ctx context.Context, conn *pgx.Conn, pl *plan, p Payload) error {
	oids := make([]uint32, len(pl.tables))
	for i, r := range pl.tables {
		oids[i] = r.OID
	}
	rows, _ := conn.Query(ctx, `
		SELECT k.oid::pg_catalog.int8 FROM pg_catalog.pg_constraint k
		WHERE k.contype = 'p' AND k.conrelid = ANY ($1::pg_catalog.oid[]) ORDER BY 1`, oids)
	pks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for _, o := range pks {
		pl.pkOIDs = append(pl.pkOIDs, uint32(o))
	}
	// Only the constraints of their own: a partition's clone of its parent's key comes with it.
	rows, _ = conn.Query(ctx, `
		SELECT k.oid::pg_catalog.int8 AS oid, k.conrelid::pg_catalog.regclass::pg_catalog.text AS tbl,
		       k.conname::pg_catalog.text AS name, pg_catalog.pg_get_constraintdef(k.oid) AS definition,
		       c.relkind = 'p' AS partitioned
		FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
		WHERE k.contype = 'f' AND k.conrelid = ANY ($1::pg_catalog.oid[]) AND k.conparentid = 0 ORDER BY 1`, oids)
	fks, err := pgx.CollectRows(rows, pgx.RowToStructByName[foreignKey])
	if err != nil {
		return err
	}
	pl.fks = fks
	rows, _ = conn.Query(ctx, `
		SELECT g.oid::pg_catalog.int8 FROM pg_catalog.pg_trigger g
		WHERE g.tgrelid = ANY ($1::pg_catalog.oid[]) AND NOT g.tgisinternal AND g.tgparentid = 0 ORDER BY 1`, oids)
	trigs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for _, o := range trigs {
		pl.triggers = append(pl.triggers, uint32(o))
	}
	// A schema's sequences, or those the moved tables' columns own.
	rows, _ = conn.Query(ctx, `
		SELECT c.oid::pg_catalog.regclass::pg_catalog.text FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND (n.nspname = $2::pg_catalog.text OR EXISTS (
			SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
			AND d.objid = c.oid AND d.refobjid = ANY ($1::pg_catalog.oid[]) AND d.deptype IN ('a', 'i')))
		ORDER BY 1`, oids, p.Schema)
	pl.sequences, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return err
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
