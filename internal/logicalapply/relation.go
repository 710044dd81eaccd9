package logicalapply

import (
	"context"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// relation is a source relation as its last RelationMessage described it, resolved against
// the target's catalog on first use: the SQL of each kind of change, built once.
type relation struct {
	id      uint32
	name    pgx.Identifier // schema, table
	display string         // schema.table, for errors and logs
	cols    []string       // column names in the order of the stream's tuples

	resolved bool
	quoted   string   // the target table, schema-qualified and quoted, with ONLY when plain
	types    []string // target type of each column (format_type), by stream position
	key      []int    // stream positions of the key columns, in the key's order
	keyOps   []string // OPERATOR(schema.=) of each key column
	insert   string
	delete   string
	updates  map[string]string // UPDATE statements by the set of columns they set
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{
		id:      m.RelationID,
		name:    pgx.Identifier{m.Namespace, m.RelationName},
		display: m.Namespace + "." + m.RelationName,
	}
	for _, c := range m.Columns {
		r.cols = append(r.cols, c.Name)
	}
	return r
}

// operatorName is what an operator's name may consist of; anything else would not be an
// operator and must not reach the SQL text.
var operatorName = regexp.MustCompile("^[-+*/<>=~!@#%^&|`?]{1,63}$")

// resolve looks the relation up in the target's catalog: its kind, the type of each column
// the stream sends, and its replica identity key with the key columns' equality operators.
// It runs in the current target transaction; the statements it builds are prepared there.
func (r *relation) resolve(ctx context.Context, conn *pgx.Conn) error {
	var (
		oid     uint32
		relkind string
	)
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::pg_catalog.text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
		WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.name
		  AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.text::pg_catalog.name`,
		r.name[0], r.name[1]).Scan(&oid, &relkind)
	if err == pgx.ErrNoRows {
		return refused("table %s does not exist on the target", r.display)
	}
	if err != nil {
		return err
	}
	switch relkind {
	case "r":
		// ONLY: an inheritance child's rows are not this table's.
		r.quoted = "ONLY " + r.name.Sanitize()
	case "p":
		// A partitioned table takes its rows through its partitions.
		r.quoted = r.name.Sanitize()
	default:
		return refused("%s is not a table on the target (relkind %s)", r.display, relkind)
	}

	types := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped`, oid)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return err
		}
		types[name] = typ
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.types = make([]string, len(r.cols))
	pos := map[string]int{}
	for i, c := range r.cols {
		t, ok := types[c]
		if !ok {
			return refused("column %q of %s does not exist on the target", c, r.display)
		}
		r.types[i] = t
		pos[c] = i
	}

	r.key, r.keyOps = nil, nil
	rows, err = conn.Query(ctx, `SELECT a.attname::pg_catalog.text, opn.nspname::pg_catalog.text, o.oprname::pg_catalog.text
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_index i ON i.indrelid OPERATOR(pg_catalog.=) c.oid
		CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(i.indkey::pg_catalog.int2[]), pg_catalog.unnest(i.indclass::pg_catalog.oid[])) WITH ORDINALITY AS k(attnum, opclass, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		JOIN pg_catalog.pg_opclass oc ON oc.oid OPERATOR(pg_catalog.=) k.opclass
		JOIN pg_catalog.pg_amop ao ON ao.amopfamily OPERATOR(pg_catalog.=) oc.opcfamily
			AND ao.amopmethod OPERATOR(pg_catalog.=) oc.opcmethod
			AND ao.amoplefttype OPERATOR(pg_catalog.=) oc.opcintype
			AND ao.amoprighttype OPERATOR(pg_catalog.=) oc.opcintype
			AND ao.amopstrategy OPERATOR(pg_catalog.=) 3::pg_catalog.int2
		JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) ao.amopopr
		JOIN pg_catalog.pg_namespace opn ON opn.oid OPERATOR(pg_catalog.=) o.oprnamespace
		WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid
		  AND (i.indisreplident OR (i.indisprimary AND c.relreplident OPERATOR(pg_catalog.=) 'd'::pg_catalog."char"))
		  AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts
		ORDER BY k.ord`, oid)
	if err != nil {
		return err
	}
	for rows.Next() {
		var col, nsp, op string
		if err := rows.Scan(&col, &nsp, &op); err != nil {
			return err
		}
		if !operatorName.MatchString(op) {
			return refused("key column %q of %s: unexpected equality operator %q", col, r.display, op)
		}
		i, ok := pos[col]
		if !ok {
			return refused("key column %q of %s on the target is not sent by the source", col, r.display)
		}
		r.key = append(r.key, i)
		r.keyOps = append(r.keyOps, "OPERATOR("+pgx.Identifier{nsp}.Sanitize()+"."+op+")")
	}
	if err := rows.Err(); err != nil {
		return err
	}

	r.insert = r.buildInsert()
	r.delete = ""
	if len(r.key) > 0 {
		r.delete = "DELETE FROM " + r.quoted + " WHERE " + r.keyCondition(1)
	}
	r.updates = map[string]string{}
	r.resolved = true
	return nil
}

// param is the n-th parameter, sent as text and cast by the server to column i's type.
func (r *relation) param(n, i int) string {
	return "$" + strconv.Itoa(n) + "::pg_catalog.text::" + r.types[i]
}

func (r *relation) buildInsert() string {
	var cols, vals []string
	for i, c := range r.cols {
		cols = append(cols, pgx.Identifier{c}.Sanitize())
		vals = append(vals, r.param(i+1, i))
	}
	// OVERRIDING SYSTEM VALUE: identity columns GENERATED ALWAYS take the source's values.
	return "INSERT INTO " + strings.TrimPrefix(r.quoted, "ONLY ") + " (" + strings.Join(cols, ", ") +
		") OVERRIDING SYSTEM VALUE VALUES (" + strings.Join(vals, ", ") + ")"
}

// keyCondition addresses a row by its key, with parameters numbered from first.
func (r *relation) keyCondition(first int) string {
	var conds []string
	for j, i := range r.key {
		conds = append(conds, pgx.Identifier{r.cols[i]}.Sanitize()+" "+r.keyOps[j]+" "+r.param(first+j, i))
	}
	return strings.Join(conds, " AND ")
}

// update returns the UPDATE that sets the columns marked in set (one byte per column, 1 to
// set), then addresses the row by its key.
func (r *relation) update(set []byte) string {
	if s, ok := r.updates[string(set)]; ok {
		return s
	}
	var sets []string
	n := 0
	for i, c := range r.cols {
		if set[i] == 1 {
			n++
			sets = append(sets, pgx.Identifier{c}.Sanitize()+" = "+r.param(n, i))
		}
	}
	s := "UPDATE " + r.quoted + " SET " + strings.Join(sets, ", ") + " WHERE " + r.keyCondition(n+1)
	r.updates[string(set)] = s
	return s
}
