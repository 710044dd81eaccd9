package parquetcopy

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Column is one column of the exported table, as read by Columns.
type Column struct {
	Name string
	// TypeOID is the column's type; for a column whose declared type is a domain, the
	// domain's base type (see Domain).
	TypeOID uint32
	// TypeName is format_type(TypeOID, Typmod), used in messages and the manifest.
	TypeName string
	Typmod   int32
	// ElemOID is the element type when TypeOID is an array type, else 0; for an array of a
	// domain, the domain's base type, and Typmod is then the domain's typmod.
	ElemOID uint32
	// ElemDomainOID is, for an array of a domain, the domain: the element type its values
	// carry in COPY. 0 otherwise.
	ElemDomainOID uint32
	NotNull       bool
	// Enum reports that TypeOID (for an array: ElemOID) is an enum type; enums export as STRING.
	Enum bool
	// Domain is the declared type's name when the column's type is a domain, else "".
	Domain string
}

// PostgreSQL type OIDs (pg_type.dat; fixed across versions).
const (
	oidBool        = 16
	oidBytea       = 17
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidBpchar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
	oidJSONB       = 3802
)

// supportedList is the list named in CheckSupported's error.
const supportedList = "smallint, integer, bigint, real, double precision, numeric, text, varchar, char, name, " +
	"boolean, date, timestamp, timestamptz, uuid, json, jsonb, bytea, enums, domains over these, " +
	"and one-dimensional arrays of these"

// columnsSQL lists the columns of relation %s in attnum order, resolving domains (possibly
// nested) to their base type and typmod, and so the elements of arrays of domains. It names only pg_catalog's functions; sessions of an
// export also pin search_path to pg_catalog, so that its operators are pg_catalog's too.
const columnsSQL = `
WITH RECURSIVE a AS (
	SELECT attnum, attname, atttypid, atttypmod, attnotnull
	FROM pg_catalog.pg_attribute
	WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped
), b(attnum, typid, typmod) AS (
	SELECT attnum, atttypid, atttypmod FROM a
	UNION ALL
	SELECT b.attnum, t.typbasetype, t.typtypmod
	FROM b JOIN pg_catalog.pg_type t ON t.oid = b.typid
	WHERE t.typtype = 'd'
), el(attnum, typid, typmod) AS (
	SELECT b.attnum, t.typelem, b.typmod
	FROM b JOIN pg_catalog.pg_type t ON t.oid = b.typid
	WHERE t.typtype <> 'd' AND t.typlen = -1 AND t.typelem <> 0
	UNION ALL
	SELECT el.attnum, t.typbasetype, t.typtypmod
	FROM el JOIN pg_catalog.pg_type t ON t.oid = el.typid
	WHERE t.typtype = 'd'
)
SELECT a.attname,
	b.typid,
	pg_catalog.format_type(b.typid, b.typmod),
	COALESCE(el.typmod, b.typmod),
	COALESCE(el.typid, 0),
	a.attnotnull,
	COALESCE(e.typtype, t.typtype) = 'e',
	CASE WHEN a.atttypid <> b.typid THEN pg_catalog.format_type(a.atttypid, a.atttypmod) ELSE '' END,
	CASE WHEN t.typlen = -1 AND t.typelem <> 0 THEN t.typelem ELSE 0 END
FROM a
JOIN b ON b.attnum = a.attnum
JOIN pg_catalog.pg_type t ON t.oid = b.typid AND t.typtype <> 'd'
LEFT JOIN (el JOIN pg_catalog.pg_type e ON e.oid = el.typid AND e.typtype <> 'd') ON el.attnum = a.attnum
ORDER BY a.attnum`

// Columns reads the columns of table (attnum > 0, not dropped, in attnum order) from
// pg_attribute and pg_type.
func Columns(ctx context.Context, conn *pgconn.PgConn, table pgx.Identifier) ([]Column, error) {
	return columns(ctx, conn, "$1::pg_catalog.regclass", table.Sanitize(), "table "+table.Sanitize())
}

// ColumnsOf reads the columns of the relation with the given OID, as Columns does.
func ColumnsOf(ctx context.Context, conn *pgconn.PgConn, oid uint32) ([]Column, error) {
	arg := strconv.FormatUint(uint64(oid), 10)
	return columns(ctx, conn, "$1::pg_catalog.oid", arg, "the relation with OID "+arg)
}

func columns(ctx context.Context, conn *pgconn.PgConn, relation, arg, what string) ([]Column, error) {
	rr := conn.ExecParams(ctx, fmt.Sprintf(columnsSQL, relation), [][]byte{[]byte(arg)}, nil, nil, nil)
	var cols []Column
	for rr.NextRow() {
		v := rr.Values()
		var c Column
		c.Name = string(v[0])
		oid, err1 := strconv.ParseUint(string(v[1]), 10, 32)
		c.TypeName = string(v[2])
		mod, err2 := strconv.ParseInt(string(v[3]), 10, 32)
		elem, err3 := strconv.ParseUint(string(v[4]), 10, 32)
		wire, err4 := strconv.ParseUint(string(v[8]), 10, 32)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			rr.Close()
			return nil, fmt.Errorf("reading columns of %s: %w", what, err)
		}
		c.TypeOID, c.Typmod, c.ElemOID = uint32(oid), int32(mod), uint32(elem)
		c.NotNull = string(v[5]) == "t"
		c.Enum = string(v[6]) == "t"
		c.Domain = string(v[7])
		if wire != elem {
			c.ElemDomainOID = uint32(wire)
		}
		cols = append(cols, c)
	}
	if _, err := rr.Close(); err != nil {
		return nil, fmt.Errorf("reading columns of %s: %w", what, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%s has no columns", what)
	}
	return cols, nil
}

// kind is how one value is decoded and which Parquet leaf it becomes.
type kind uint8

const (
	kInvalid kind = iota
	kBool
	kInt2
	kInt4
	kInt8
	kFloat4
	kFloat8
	kDecimal32   // numeric(p≤9,s) → INT32
	kDecimal64   // numeric(p≤18,s) → INT64
	kDecimalFLBA // numeric(p≤38,s) → FIXED_LEN_BYTE_ARRAY(n)
	kNumericText // numeric without usable typmod → STRING
	kText        // text, varchar, bpchar, name, enum → STRING (bytes as sent)
	kJSON        // json → JSON
	kJSONB       // jsonb → JSON (version byte stripped)
	kBytea
	kDate
	kTimestamp
	kTimestamptz
	kUUID
)

// spec is the resolved export plan for one column.
type spec struct {
	kind      kind
	list      bool
	optional  bool
	precision int // decimals
	scale     int
	flbaLen   int // kDecimalFLBA
	elemOID   uint32
}

// numericTypmod decodes a numeric typmod; ok is false for an unconstrained numeric.
func numericTypmod(typmod int32) (precision, scale int, ok bool) {
	if typmod < 4 { // VARHDRSZ
		return 0, 0, false
	}
	t := typmod - 4
	precision = int((t >> 16) & 0xffff)
	// PostgreSQL 15 allows scales from -1000 to 1000, stored as 11-bit two's complement.
	scale = int(((t & 0x7ff) ^ 1024) - 1024)
	return precision, scale, true
}

func scalarKind(oid uint32, typmod int32, enum bool) (spec, bool) {
	if enum {
		return spec{kind: kText}, true
	}
	switch oid {
	case oidBool:
		return spec{kind: kBool}, true
	case oidInt2:
		return spec{kind: kInt2}, true
	case oidInt4:
		return spec{kind: kInt4}, true
	case oidInt8:
		return spec{kind: kInt8}, true
	case oidFloat4:
		return spec{kind: kFloat4}, true
	case oidFloat8:
		return spec{kind: kFloat8}, true
	case oidNumeric:
		p, s, ok := numericTypmod(typmod)
		switch {
		case !ok || p < 1 || p > 38 || s < 0 || s > p:
			return spec{kind: kNumericText}, true
		case p <= 9:
			return spec{kind: kDecimal32, precision: p, scale: s}, true
		case p <= 18:
			return spec{kind: kDecimal64, precision: p, scale: s}, true
		default:
			return spec{kind: kDecimalFLBA, precision: p, scale: s, flbaLen: decimalBytes(p)}, true
		}
	case oidText, oidVarchar, oidBpchar, oidName:
		return spec{kind: kText}, true
	case oidJSON:
		return spec{kind: kJSON}, true
	case oidJSONB:
		return spec{kind: kJSONB}, true
	case oidBytea:
		return spec{kind: kBytea}, true
	case oidDate:
		return spec{kind: kDate}, true
	case oidTimestamp:
		return spec{kind: kTimestamp}, true
	case oidTimestamptz:
		return spec{kind: kTimestamptz}, true
	case oidUUID:
		return spec{kind: kUUID}, true
	}
	return spec{}, false
}

// decimalBytes is the smallest n such that a signed n-byte integer holds every p-digit value.
func decimalBytes(p int) int {
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil) // 10^p
	for n := 1; ; n++ {
		max := new(big.Int).Lsh(big.NewInt(1), uint(8*n-1)) // 2^(8n-1) > 10^p - 1
		if max.Cmp(limit) >= 0 {
			return n
		}
	}
}

func specOf(c Column) (spec, error) {
	var s spec
	var ok bool
	if c.ElemOID != 0 {
		s, ok = scalarKind(c.ElemOID, c.Typmod, c.Enum)
		s.list, s.elemOID = true, c.ElemOID
		if c.ElemDomainOID != 0 {
			s.elemOID = c.ElemDomainOID
		}
	} else {
		s, ok = scalarKind(c.TypeOID, c.Typmod, c.Enum)
	}
	if !ok {
		typ := c.TypeName
		if c.Domain != "" {
			typ = fmt.Sprintf("%s (domain over %s)", c.Domain, c.TypeName)
		}
		return spec{}, fmt.Errorf("column %s has type %s, which export does not support (supported: %s)",
			strconv.Quote(c.Name), typ, supportedList)
	}
	s.optional = !c.NotNull
	return s, nil
}

// CheckSupported returns an error naming the first column whose type export does not support.
func CheckSupported(cols []Column) error {
	if len(cols) == 0 {
		return errors.New("no columns to export")
	}
	seen := make(map[string]bool, len(cols))
	for _, c := range cols {
		if _, err := specOf(c); err != nil {
			return err
		}
		if seen[c.Name] {
			return fmt.Errorf("column %s appears twice", strconv.Quote(c.Name))
		}
		seen[c.Name] = true
	}
	return nil
}

func specsOf(cols []Column) ([]spec, error) {
	if err := CheckSupported(cols); err != nil {
		return nil, err
	}
	specs := make([]spec, len(cols))
	for i, c := range cols {
		specs[i], _ = specOf(c)
	}
	return specs, nil
}

// CopySQL builds `COPY (SELECT cols FROM ONLY table WHERE ctid >= '(startPage,0)' AND ctid <
// '(endPage,0)') TO STDOUT (FORMAT binary)`, naming pg_catalog's operators and type, since it
// runs in the owner's session. endPage < 0 leaves the range open-ended, and startPage 0 with
// endPage < 0 copies the whole table.
func CopySQL(table pgx.Identifier, cols []Column, startPage, endPage int64) string {
	var b strings.Builder
	b.WriteString("COPY (SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c.Name}.Sanitize())
	}
	// ONLY: a plain table's inheritance children are other relations, which the caller neither
	// checked nor sized.
	b.WriteString(" FROM ONLY ")
	b.WriteString(table.Sanitize())
	var conds []string
	if startPage > 0 {
		conds = append(conds, fmt.Sprintf("ctid OPERATOR(pg_catalog.>=) '(%d,0)'::pg_catalog.tid", startPage))
	}
	if endPage >= 0 {
		conds = append(conds, fmt.Sprintf("ctid OPERATOR(pg_catalog.<) '(%d,0)'::pg_catalog.tid", endPage))
	}
	if len(conds) > 0 {
		b.WriteString(" WHERE ")
		b.WriteString(strings.Join(conds, " AND "))
	}
	b.WriteString(") TO STDOUT (FORMAT binary)")
	return b.String()
}

// PageRange is a half-open range of heap pages [Start, End); End < 0 means open-ended.
type PageRange struct{ Start, End int64 }

// SplitPages splits table's heap into n ranges of about equal page count, from its current
// size (pg_relation_size). The last range is open-ended, so pages added after the split are
// still exported.
func SplitPages(ctx context.Context, conn *pgconn.PgConn, table pgx.Identifier, n int) ([]PageRange, error) {
	if n < 1 {
		n = 1
	}
	sql := `SELECT pg_catalog.pg_relation_size($1::regclass) / pg_catalog.current_setting('block_size')::bigint`
	rr := conn.ExecParams(ctx, sql, [][]byte{[]byte(table.Sanitize())}, nil, nil, nil)
	var pages int64
	for rr.NextRow() {
		p, err := strconv.ParseInt(string(rr.Values()[0]), 10, 64)
		if err != nil {
			rr.Close()
			return nil, err
		}
		pages = p
	}
	if _, err := rr.Close(); err != nil {
		return nil, fmt.Errorf("sizing %s: %w", table.Sanitize(), err)
	}
	if int64(n) > pages {
		n = max(1, int(pages))
	}
	ranges := make([]PageRange, n)
	for i := range ranges {
		ranges[i] = PageRange{Start: pages * int64(i) / int64(n), End: pages * int64(i+1) / int64(n)}
	}
	ranges[n-1].End = -1
	return ranges, nil
}
