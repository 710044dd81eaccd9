package move

import (
	"context"
	"encoding/json"
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
