package parquetcopy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/deckhandhq/deckhand/export/parquetcopy"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	return pgtest.Connect(t, pgtest.Shared(t).DSN(pgtest.NewDatabase(t), pgcluster.Superuser))
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// export runs Write over the whole table and returns the file.
func export(t *testing.T, conn *pgx.Conn, table string, opts parquetcopy.Options) ([]byte, []parquetcopy.Column, parquetcopy.Stats, error) {
	t.Helper()
	ctx := context.Background()
	id := pgx.Identifier{table}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := parquetcopy.Write(ctx, conn.PgConn(), parquetcopy.CopySQL(id, cols, 0, -1), cols, &buf, opts)
	return buf.Bytes(), cols, st, err
}

func openFile(t *testing.T, b []byte) *parquet.File {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("reading the Parquet file back: %v", err)
	}
	return f
}

// readRows reads every row; cells[r][c] holds the values of column c in row r (several for a
// list column).
func readRows(t *testing.T, b []byte) [][][]parquet.Value {
	t.Helper()
	f := openFile(t, b)
	ncols := len(f.Schema().Fields())
	var out [][][]parquet.Value
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]parquet.Row, 64)
		for {
			n, err := rows.ReadRows(buf)
			for _, row := range buf[:n] {
				cells := make([][]parquet.Value, ncols)
				for _, v := range row {
					cells[v.Column()] = append(cells[v.Column()], v.Clone())
				}
				out = append(out, cells)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rows.Close()
	}
	return out
}

// colCase is one column of the round-trip table: its type, a SQL literal per row, the SQL
// expression (with %s for the column) whose text PostgreSQL returns as the expected value,
// and how a Parquet cell prints in the same form.
type colCase struct {
	name    string
	typ     string
	values  []string
	expect  string              // default "%s::text"
	pgNorm  func(string) string // optional normalisation of PostgreSQL's text
	show    func(parquet.Value) string
	list    bool
	parquet string // expected ParquetType in SchemaDescription
}

const nullText = "NULL"

// listExpr prints an array as showCell prints a list: {a|b|NULL}, {} or NULL.
const listExpr = "CASE WHEN %[1]s IS NOT NULL THEN (SELECT '{' || coalesce(string_agg(coalesce(e::text, 'NULL'), '|' ORDER BY o), '') || '}' FROM unnest(%[1]s) WITH ORDINALITY AS x(e, o)) END"

func showInt(v parquet.Value) string {
	if v.Kind() == parquet.Int32 {
		return strconv.FormatInt(int64(v.Int32()), 10)
	}
	return strconv.FormatInt(v.Int64(), 10)
}
func showBytes(v parquet.Value) string { return string(v.ByteArray()) }
func showHex(v parquet.Value) string   { return hex.EncodeToString(v.ByteArray()) }
func showBool(v parquet.Value) string  { return strconv.FormatBool(v.Boolean()) }
func showFloat(v parquet.Value) string {
	if v.Kind() == parquet.Float {
		return canonFloat(float64(v.Float()))
	}
	return canonFloat(v.Double())
}
func canonFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
func pgFloat(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "bad float " + s
	}
	return canonFloat(f)
}
func showUUID(v parquet.Value) string {
	b := v.ByteArray()
	if len(b) != 16 {
		return fmt.Sprintf("%d-byte uuid", len(b))
	}
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// showDecimal prints an unscaled DECIMAL value (INT32, INT64 or big-endian two's complement
// bytes) with the given scale, as PostgreSQL prints numeric(p,scale).
func showDecimal(scale int) func(parquet.Value) string {
	return func(v parquet.Value) string {
		var n big.Int
		switch v.Kind() {
		case parquet.Int32:
			n.SetInt64(int64(v.Int32()))
		case parquet.Int64:
			n.SetInt64(v.Int64())
		default:
			b := v.ByteArray()
			n.SetBytes(b)
			if len(b) > 0 && b[0]&0x80 != 0 {
				n.Sub(&n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
			}
		}
		neg := n.Sign() < 0
		digits := new(big.Int).Abs(&n).String()
		if scale > 0 {
			if len(digits) <= scale {
				digits = strings.Repeat("0", scale-len(digits)+1) + digits
			}
			digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
		}
		if neg {
			digits = "-" + digits
		}
		return digits
	}
}

func roundTripCases() []colCase {
	// Six rows per column; the last row of every nullable column is NULL.
	return []colCase{
		{name: "i2", typ: "smallint", values: []string{"0", "-32768", "32767", "1", "-1", "NULL"}, show: showInt, parquet: "INT32 (INT(16,true))"},
		{name: "i4", typ: "integer", values: []string{"0", "-2147483648", "2147483647", "42", "-7", "NULL"}, show: showInt, parquet: "INT32"},
		{name: "i8", typ: "bigint NOT NULL", values: []string{"0", "-9223372036854775808", "9223372036854775807", "1", "-1", "5"}, show: showInt, parquet: "INT64"},
		{name: "f4", typ: "real", values: []string{"0", "1.5", "'NaN'", "'Infinity'", "-3.4e38", "NULL"},
			expect: "%s::float8::text", pgNorm: pgFloat, show: showFloat, parquet: "FLOAT"},
		{name: "f8", typ: "double precision", values: []string{"0.1", "-1e-300", "'-Infinity'", "'NaN'", "1.7976931348623157e308", "NULL"},
			pgNorm: pgFloat, show: showFloat, parquet: "DOUBLE"},
		{name: "d5_2", typ: "numeric(5,2)", values: []string{"0", "-999.99", "999.99", "0.01", "12.3", "NULL"}, show: showDecimal(2), parquet: "INT32 (DECIMAL(5,2))"},
		{name: "d9_0", typ: "numeric(9,0)", values: []string{"0", "-999999999", "999999999", "10000", "1", "NULL"}, show: showDecimal(0), parquet: "INT32 (DECIMAL(9,0))"},
		{name: "d12_2", typ: "numeric(12,2) NOT NULL", values: []string{"0", "-9999999999.99", "9999999999.99", "100.5", "0.07", "10000.00"}, show: showDecimal(2), parquet: "INT64 (DECIMAL(12,2))"},
		{name: "d18_6", typ: "numeric(18,6)", values: []string{"0.000001", "-999999999999.999999", "999999999999.999999", "123456.7", "-0.5", "NULL"}, show: showDecimal(6), parquet: "INT64 (DECIMAL(18,6))"},
		{name: "d20_4", typ: "numeric(20,4)", values: []string{"0", "-9999999999999999.9999", "9999999999999999.9999", "1e10", "-0.0001", "NULL"}, show: showDecimal(4), parquet: "FIXED_LEN_BYTE_ARRAY(9) (DECIMAL(20,4))"},
		{name: "d38_10", typ: "numeric(38,10)", values: []string{"0", "-9999999999999999999999999999.9999999999", "9999999999999999999999999999.9999999999", "1e20", "-1e-10", "NULL"},
			show: showDecimal(10), parquet: "FIXED_LEN_BYTE_ARRAY(16) (DECIMAL(38,10))"},
		{name: "d5_5", typ: "numeric(5,5)", values: []string{"0", "-0.99999", "0.99999", "0.5", "0.00001", "NULL"}, show: showDecimal(5), parquet: "INT32 (DECIMAL(5,5))"},
		{name: "n", typ: "numeric", values: []string{"0", "-0.000001", "123456789012345678901234567890.123456789", "'NaN'", "'-Infinity'", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "n2", typ: "numeric", values: []string{"0.10", "1e-20", "'Infinity'", "100", "-12345678.9", "1e100"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "n40", typ: "numeric(40,2)", values: []string{"0", "-12345678901234567890123456789012345678.12", "1.5", "7", "0.01", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "nneg", typ: "numeric(5,-2)", values: []string{"0", "1234500", "-100", "50", "149", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "t", typ: "text", values: []string{"''", "'hello'", "'ünïcödé ✓'", "'with\nnewline, \"quotes\" and \\'", "repeat('x', 5000)", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "vc", typ: "varchar(10)", values: []string{"''", "'a'", "'abcdefghij'", "'  x  '", "'z'", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "bp", typ: "char(5)", values: []string{"''", "'ab'", "'abcde'", "' x'", "'q'", "NULL"}, expect: "rpad(%s::text, 5)", show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "nm", typ: "name", values: []string{"'pg_class'", "''", "'x'", "'Mixed Case'", "'y'", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "mood", typ: "mood", values: []string{"'sad'", "'ok'", "'happy'", "'ok'", "'sad'", "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (STRING)"},
		{name: "pos", typ: "positive_int", values: []string{"1", "2", "3", "4", "5", "NULL"}, show: showInt, parquet: "INT32"},
		{name: "b", typ: "boolean", values: []string{"true", "false", "true", "false", "true", "NULL"}, show: showBool, parquet: "BOOLEAN"},
		{name: "dt", typ: "date", values: []string{"'2000-01-01'", "'1970-01-01'", "'1999-12-31'", "'0044-03-15 BC'", "'5874897-12-31'", "NULL"},
			expect: "(%s - date '1970-01-01')::text", show: showInt, parquet: "INT32 (DATE)"},
		{name: "ts", typ: "timestamp", values: []string{"'2000-01-01 00:00:00'", "'1999-12-31 23:59:59.999999'", "'1970-01-01'", "'1900-06-15 12:00:00.5'", "'2262-04-11 23:47:16.854775'", "NULL"},
			expect: "(extract(epoch from %s) * 1000000)::bigint::text", show: showInt, parquet: "INT64 (TIMESTAMP(MICROS,false))"},
		{name: "tstz", typ: "timestamptz", values: []string{"'2000-01-01 00:00:00+00'", "'1999-12-31 23:59:59.999999-08'", "'2024-03-10 02:30:00 America/New_York'", "'1969-07-20 20:17:40+00'", "'0100-01-01 12:00:00+05:30'", "NULL"},
			expect: "(extract(epoch from %s) * 1000000)::bigint::text", show: showInt, parquet: "INT64 (TIMESTAMP(MICROS,true))"},
		{name: "u", typ: "uuid", values: []string{"'00000000-0000-0000-0000-000000000000'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'12345678-1234-5678-1234-567812345678'", "gen_random_uuid()", "NULL"},
			show: showUUID, parquet: "FIXED_LEN_BYTE_ARRAY(16) (UUID)"},
		{name: "j", typ: "json", values: []string{`'{"b": 1,  "a": [1, 2]}'`, `'null'`, `'"str"'`, `'[]'`, `'{"ü": "✓"}'`, "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (JSON)"},
		{name: "jb", typ: "jsonb", values: []string{`'{"b": 1,  "a": [1, 2]}'`, `'null'`, `'"str"'`, `'[]'`, `'{"ü": "✓", "n": 1.50}'`, "NULL"}, show: showBytes, parquet: "BYTE_ARRAY (JSON)"},
		{name: "by", typ: "bytea", values: []string{`'\x'`, `'\x00ff10'`, `'abc'::bytea`, `decode(repeat('ab', 3000), 'hex')`, `'\x00'`, "NULL"},
			expect: "encode(%s, 'hex')", show: showHex, parquet: "BYTE_ARRAY"},
		{name: "ai4", typ: "integer[]", list: true, values: []string{"'{}'", "'{1,NULL,3}'", "'{NULL}'", "'[5:6]={7,8}'", "ARRAY[2147483647]", "NULL"}, show: showInt, parquet: "LIST<INT32>"},
		{name: "at", typ: "text[] NOT NULL", list: true, values: []string{"'{}'", `'{"a,b",NULL,"",x}'`, "'{only}'", "ARRAY[repeat('y', 300)]", "'{NULL,NULL}'", "'{z}'"}, show: showBytes, parquet: "LIST<BYTE_ARRAY (STRING)>"},
		{name: "an", typ: "numeric(10,2)[]", list: true, values: []string{"'{1.5,-2.25,NULL}'", "'{}'", "'{99999999.99}'", "NULL", "'{0}'", "'{3}'"}, show: showDecimal(2), parquet: "LIST<INT64 (DECIMAL(10,2))>"},
		{name: "ad", typ: "date[]", list: true, values: []string{"'{2000-01-01,1970-01-02}'", "'{}'", "'{NULL,1999-12-31}'", "NULL", "'{2024-02-29}'", "'{}'"},
			expect: "CASE WHEN %[1]s IS NOT NULL THEN (SELECT '{' || coalesce(string_agg(coalesce((e - date '1970-01-01')::text, 'NULL'), '|' ORDER BY o), '') || '}' FROM unnest(%[1]s) WITH ORDINALITY AS x(e, o)) END",
			show:   showInt, parquet: "LIST<INT32 (DATE)>"},
		{name: "au", typ: "uuid[]", list: true, values: []string{"'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'", "NULL", "'{}'", "'{NULL}'", "'{00000000-0000-0000-0000-000000000001,ffffffff-ffff-ffff-ffff-ffffffffffff}'", "NULL"},
			show: showUUID, parquet: "LIST<FIXED_LEN_BYTE_ARRAY(16) (UUID)>"},
		{name: "ab", typ: "boolean[]", list: true, values: []string{"'{t,f,NULL}'", "'{}'", "NULL", "'{t}'", "'{f}'", "NULL"}, show: showBool, parquet: "LIST<BOOLEAN>"},
		{name: "aj", typ: "jsonb[]", list: true, values: []string{`ARRAY['{"a": 1}'::jsonb, NULL, '[1]']`, "'{}'", "NULL", `ARRAY['2'::jsonb]`, "NULL", "NULL"},
			expect: listExpr,
			show:   showBytes, parquet: "LIST<BYTE_ARRAY (JSON)>"},
		{name: "am", typ: "mood[]", list: true, values: []string{"'{sad,happy}'", "'{}'", "NULL", "'{NULL,ok}'", "'{ok}'", "NULL"}, show: showBytes, parquet: "LIST<BYTE_ARRAY (STRING)>"},
		// Arrays of domains carry the domain's OID as their element type, and their elements
		// take the domain's base type and typmod.
		{name: "aprice", typ: "price[]", list: true, values: []string{"'{1.5,NULL,0}'", "'{}'", "NULL", "'{99999999.99}'", "ARRAY[2.25]::price[]", "NULL"}, show: showDecimal(2), parquet: "LIST<INT64 (DECIMAL(10,2))>"},
		{name: "abig", typ: "big_price[] NOT NULL", list: true, values: []string{"'{1.5}'", "'{}'", "'{NULL}'", "'{123456789012345678901234567890.12345678}'", "'{-0.00000001}'", "'{0}'"}, show: showDecimal(8), parquet: "LIST<FIXED_LEN_BYTE_ARRAY(16) (DECIMAL(38,8))>"},
		{name: "amd", typ: "mood_d[]", list: true, values: []string{"'{sad,happy}'", "'{}'", "NULL", "'{NULL,ok}'", "'{ok}'", "NULL"}, show: showBytes, parquet: "LIST<BYTE_ARRAY (STRING)>"},
		{name: "il", typ: "int_list", list: true, values: []string{"'{1,2}'", "'{}'", "NULL", "'{NULL}'", "'{-5}'", "NULL"}, show: showInt, parquet: "LIST<INT32>"},
	}
}

const roundTripSetup = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(10,2) CHECK (VALUE >= 0);
CREATE DOMAIN big_amount AS numeric(38,8);
CREATE DOMAIN big_price AS big_amount;
CREATE DOMAIN mood_d AS mood;
CREATE DOMAIN int_list AS integer[];
SET TIME ZONE 'Europe/Berlin';
`

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	mustExec(t, conn, roundTripSetup)
	cases := roundTripCases()
	const nrows = 6
	var defs []string
	for _, c := range cases {
		if len(c.values) != nrows {
			t.Fatalf("case %s has %d values", c.name, len(c.values))
		}
		defs = append(defs, c.name+" "+c.typ)
	}
	// A dropped column must not show up.
	mustExec(t, conn, "CREATE TABLE rt (gone int, "+strings.Join(defs, ", ")+", ord int NOT NULL); ALTER TABLE rt DROP COLUMN gone")
	for r := range nrows {
		var vals []string
		for _, c := range cases {
			vals = append(vals, c.values[r])
		}
		mustExec(t, conn, fmt.Sprintf("INSERT INTO rt VALUES (%s, %d)", strings.Join(vals, ", "), r))
	}
	// Export the rows in a known order through a custom statement, the way a caller may.
	id := pgx.Identifier{"rt"}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != len(cases)+1 {
		t.Fatalf("Columns returned %d columns, want %d", len(cols), len(cases)+1)
	}
	if err := parquetcopy.CheckSupported(cols); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cols {
		names = append(names, pgx.Identifier{c.Name}.Sanitize())
	}
	copySQL := "COPY (SELECT " + strings.Join(names, ", ") + " FROM rt ORDER BY ord) TO STDOUT (FORMAT binary)"
	var buf bytes.Buffer
	st, err := parquetcopy.Write(ctx, conn.PgConn(), copySQL, cols, &buf, parquetcopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != nrows {
		t.Fatalf("Stats.Rows = %d", st.Rows)
	}
	if dir := os.Getenv("DECKHAND_EXPORT_KEEP"); dir != "" {
		// For checking the file with other readers.
		if err := os.WriteFile(filepath.Join(dir, "roundtrip.parquet"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readRows(t, buf.Bytes())
	if len(got) != nrows {
		t.Fatalf("read %d rows back", len(got))
	}

	// The description, and the file's own schema, follow the mapping.
	desc, err := parquetcopy.SchemaDescription(cols)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		d := desc[i]
		wantNullable := !strings.Contains(c.typ, "NOT NULL")
		if d.Name != c.name || d.ParquetType != c.parquet || d.Nullable != wantNullable {
			t.Errorf("description of %s: %+v, want ParquetType %q, Nullable %v", c.name, d, c.parquet, wantNullable)
		}
	}
	checkFileSchema(t, buf.Bytes(), cols)

	for i, c := range cases {
		expr := c.expect
		if expr == "" {
			if c.list {
				expr = listExpr
			} else {
				expr = "%s::text"
			}
		}
		rows, err := conn.Query(ctx, "SELECT "+fmt.Sprintf(expr, c.name)+" FROM rt ORDER BY ord")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, err := pgx.CollectRows(rows, pgx.RowTo[*string])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for r := range nrows {
			w := nullText
			if want[r] != nil {
				w = *want[r]
				if c.pgNorm != nil {
					w = c.pgNorm(w)
				}
			}
			g := showCell(got[r][i], c)
			if g != w {
				t.Errorf("column %s row %d (%s): got %q, want %q", c.name, r, c.values[r], g, w)
			}
		}
	}
}

// showCell prints a cell as the colCase's PostgreSQL expression does.
func showCell(vals []parquet.Value, c colCase) string {
	if !c.list {
		if len(vals) != 1 {
			return fmt.Sprintf("%d values", len(vals))
		}
		if vals[0].IsNull() {
			return nullText
		}
		return c.show(vals[0])
	}
	if len(vals) == 1 && vals[0].IsNull() {
		// A NULL list, an empty list, or a list of one NULL, told apart by the definition level.
		nullable := !strings.Contains(c.typ, "NOT NULL")
		base := 0
		if nullable {
			base = 1
		}
		switch dl := vals[0].DefinitionLevel(); {
		case nullable && dl == 0:
			return nullText
		case dl == base:
			return "{}"
		}
	}
	var parts []string
	for _, v := range vals {
		if v.IsNull() {
			parts = append(parts, nullText)
		} else {
			parts = append(parts, c.show(v))
		}
	}
	return "{" + strings.Join(parts, "|") + "}"
}

func checkFileSchema(t *testing.T, b []byte, cols []parquetcopy.Column) {
	t.Helper()
	f := openFile(t, b)
	fields := f.Schema().Fields()
	if len(fields) != len(cols) {
		t.Fatalf("file has %d fields", len(fields))
	}
	for i, c := range cols {
		if fields[i].Name() != c.Name {
			t.Errorf("field %d is %q, want %q (column order must be kept)", i, fields[i].Name(), c.Name)
		}
		if fields[i].Optional() == c.NotNull {
			t.Errorf("field %s: optional=%v but NotNull=%v", c.Name, fields[i].Optional(), c.NotNull)
		}
	}
	// Spot-check logical types as recorded in the file.
	lt := map[string]string{}
	for _, el := range f.Metadata().Schema {
		lt[el.Name] = el.LogicalType.String()
	}
	for name, want := range map[string]string{
		"d12_2": "DECIMAL(12,2)", "d38_10": "DECIMAL(38,10)", "ts": "TIMESTAMP(isAdjustedToUTC=false,unit=MICROS)",
		"tstz": "TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)", "u": "UUID", "jb": "JSON", "t": "STRING", "dt": "DATE",
		"i2": "INT(16,true)", "ai4": "LIST",
	} {
		if got, ok := lt[name]; ok && got != want {
			t.Errorf("logical type of %s: %q, want %q", name, lt[name], want)
		}
	}
}

// TestNumerics compares many generated numeric values of every DECIMAL width and of
// unconstrained numeric with PostgreSQL's own text.
func TestNumerics(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	mustExec(t, conn, `CREATE TABLE nums (ord int NOT NULL, a numeric(4,1), b numeric(15,5), c numeric(25,3), d numeric(38,0), e numeric, f numeric(38,38));
		INSERT INTO nums SELECT g,
			round(((random() - 0.5) * 1998)::numeric, 1), -- rounding must stay within numeric(4,1)
			round(((random() - 0.5) * 1.998e10)::numeric, 5),
			round(((random() - 0.5) * 2e21)::numeric, 3),
			trunc(((random() - 0.5) * 2e37)::numeric),
			CASE g % 5 WHEN 0 THEN (random() * 10 ^ (g % 40 - 20))::numeric
				WHEN 1 THEN round(((random() - 0.5) * 1e6)::numeric, g % 12)
				WHEN 2 THEN (10::numeric ^ (g % 60 - 30))
				WHEN 3 THEN -(g::numeric / 7)
				ELSE g * 10000 END,
			round(random()::numeric, 38)
		FROM generate_series(1, 3000) g`)
	data, _, _, err := export(t, conn, "nums", parquetcopy.Options{RowGroupRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := readRows(t, data)
	rows, err := conn.Query(ctx, `SELECT ord, a::text, b::text, c::text, d::text, e::text, f::text FROM nums`)
	if err != nil {
		t.Fatal(err)
	}
	scales := []int{1, 5, 3, 0, -1, 38}
	r := 0
	for rows.Next() {
		var ord int32
		var want [6]string
		if err := rows.Scan(&ord, &want[0], &want[1], &want[2], &want[3], &want[4], &want[5]); err != nil {
			t.Fatal(err)
		}
		if got[r][0][0].Int32() != ord {
			t.Fatalf("row %d: ord %d, want %d", r, got[r][0][0].Int32(), ord)
		}
		for i, s := range scales {
			v := got[r][i+1][0]
			var g string
			if s < 0 {
				g = string(v.ByteArray())
			} else {
				g = showDecimal(s)(v)
			}
			if g != want[i] {
				t.Errorf("row %d column %d: got %s, want %s", r, i+1, g, want[i])
			}
		}
		r++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if r != len(got) {
		t.Fatalf("compared %d rows of %d", r, len(got))
	}
}

func TestEmptyTable(t *testing.T) {
	conn := connect(t)
	mustExec(t, conn, "CREATE TABLE empty (id bigint NOT NULL, name text, tags text[])")
	data, cols, st, err := export(t, conn, "empty", parquetcopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := openFile(t, data)
	if f.NumRows() != 0 || st.Rows != 0 {
		t.Fatalf("NumRows %d, Stats.Rows %d", f.NumRows(), st.Rows)
	}
	checkFileSchema(t, data, cols)
	if st.Bytes != int64(len(data)) || st.SHA256 != sha256.Sum256(data) {
		t.Fatalf("stats %+v do not match the %d bytes written", st, len(data))
	}
}

func TestUnsupportedTypes(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	mustExec(t, conn, `CREATE TYPE pair AS (a int, b text);
		CREATE DOMAIN dpoint AS point;
		CREATE TABLE odd (id int, geom point, iv interval, m money, x xml, p pair, r int4range, dp dpoint, "We""ird" interval[])`)
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), pgx.Identifier{"odd"})
	if err != nil {
		t.Fatal(err)
	}
	err = parquetcopy.CheckSupported(cols)
	want := `column "geom" has type point, which export does not support (supported: `
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckSupported: %v", err)
	}
	for i, typ := range []string{"point", "interval", "money", "xml", "pair", "int4range", "dpoint (domain over point)", "interval[]"} {
		err := parquetcopy.CheckSupported(cols[i+1 : i+2])
		if err == nil || !strings.Contains(err.Error(), "has type "+typ+",") {
			t.Errorf("column %s: %v", cols[i+1].Name, err)
		}
	}
	if _, err := parquetcopy.Schema(cols); err == nil {
		t.Error("Schema accepted an unsupported column")
	}
	// Write refuses before running anything.
	var buf bytes.Buffer
	if _, err := parquetcopy.Write(ctx, conn.PgConn(), "COPY odd TO STDOUT (FORMAT binary)", cols, &buf, parquetcopy.Options{}); err == nil || buf.Len() != 0 {
		t.Fatalf("Write: %v, %d bytes written", err, buf.Len())
	}
	if _, err := parquetcopy.Columns(ctx, conn.PgConn(), pgx.Identifier{"missing"}); err == nil {
		t.Error("Columns of a missing table succeeded")
	}
}

// TestValueErrors: values that have no Parquet representation fail the export with a clear
// error naming the column.
func TestValueErrors(t *testing.T) {
	for _, tc := range []struct{ typ, value, want string }{
		{"numeric(10,2)", "'NaN'", "NaN cannot be stored in DECIMAL(10,2)"},
		{"numeric(30,2)", "'NaN'", "NaN cannot be stored in DECIMAL(30,2)"},
		{"numeric(3,0)", "'NaN'", "NaN cannot be stored in DECIMAL(3,0)"},
		{"numeric(15,3)", "'NaN'", "NaN cannot be stored in DECIMAL(15,3)"},
		{"date", "'infinity'", "date 'infinity' cannot be exported"},
		{"timestamp", "'-infinity'", "timestamp '-infinity' cannot be exported"},
		{"timestamptz", "'infinity'", "timestamp 'infinity' cannot be exported"},
		{"timestamp", "'294276-12-31 23:59:59'", "timestamp after 294247-01-10 04:00:54.775807 UTC cannot be exported"},
		{"timestamptz", "'294270-01-01 00:00:00+00'", "timestamp after 294247-01-10 04:00:54.775807 UTC cannot be exported"},
		{"int[]", "'{{1,2},{3,4}}'", "2-dimensional array value"},
		{"numeric(10,2)[]", "'{1,NaN}'", "array element: NaN cannot be stored"},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			conn := connect(t)
			mustExec(t, conn, fmt.Sprintf("CREATE TABLE bad (id int, v %s); INSERT INTO bad SELECT g, NULL FROM generate_series(1, 3) g; INSERT INTO bad VALUES (4, %s)", tc.typ, tc.value))
			_, _, _, err := export(t, conn, "bad", parquetcopy.Options{})
			if err == nil || !strings.Contains(err.Error(), `column "v", row 4 of the COPY: `+tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCompressionAndStats(t *testing.T) {
	conn := connect(t)
	mustExec(t, conn, `CREATE TABLE c (id bigint NOT NULL, s text, j jsonb, ts timestamptz);
		INSERT INTO c SELECT g, repeat(md5(g::text), 3), jsonb_build_object('g', g), now() FROM generate_series(1, 5000) g`)
	sizes := map[string]int{}
	for name, codec := range map[string]format.CompressionCodec{"": format.Zstd, "zstd": format.Zstd, "snappy": format.Snappy, "none": format.Uncompressed} {
		data, _, st, err := export(t, conn, "c", parquetcopy.Options{Compression: name})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if st.Rows != 5000 || st.Bytes != int64(len(data)) || st.SHA256 != sha256.Sum256(data) {
			t.Fatalf("%q: stats %d rows, %d bytes, sha %x; file %d bytes, sha %x", name, st.Rows, st.Bytes, st.SHA256, len(data), sha256.Sum256(data))
		}
		f := openFile(t, data)
		for _, rg := range f.Metadata().RowGroups {
			for _, cc := range rg.Columns {
				if cc.MetaData.Codec != codec {
					t.Errorf("%q: column %v has codec %v", name, cc.MetaData.PathInSchema, cc.MetaData.Codec)
				}
			}
		}
		rows := readRows(t, data)
		if len(rows) != 5000 || rows[4999][0][0].Int64() != 5000 {
			t.Fatalf("%q: read %d rows", name, len(rows))
		}
		sizes[name] = len(data)
	}
	if sizes["zstd"] >= sizes["none"] || sizes["snappy"] >= sizes["none"] {
		t.Errorf("compression did not shrink the file: %v", sizes)
	}
	if _, _, _, err := export(t, conn, "c", parquetcopy.Options{Compression: "lzma"}); err == nil {
		t.Error("an unknown compression was accepted")
	}
}

// TestPartsAndRowGroups exports a table in ctid page ranges and checks that the parts hold
// every row exactly once, and that row groups follow RowGroupRows.
func TestPartsAndRowGroups(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	if err := parquetcopy.BenchTable(ctx, conn.PgConn(), "bench", 20000); err != nil {
		t.Fatal(err)
	}
	id := pgx.Identifier{"bench"}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := parquetcopy.SplitPages(ctx, conn.PgConn(), id, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 3 || ranges[0].Start != 0 || ranges[2].End != -1 || ranges[0].End != ranges[1].Start || ranges[1].End != ranges[2].Start {
		t.Fatalf("ranges %+v", ranges)
	}
	seen := make(map[int64]bool)
	for _, r := range ranges {
		var buf bytes.Buffer
		st, err := parquetcopy.Write(ctx, conn.PgConn(), parquetcopy.CopySQL(id, cols, r.Start, r.End), cols, &buf, parquetcopy.Options{RowGroupRows: 3000})
		if err != nil {
			t.Fatal(err)
		}
		f := openFile(t, buf.Bytes())
		var total int64
		for i, rg := range f.RowGroups() {
			n := rg.NumRows()
			if n > 3000 || (i < len(f.RowGroups())-1 && n != 3000) {
				t.Errorf("row group %d has %d rows", i, n)
			}
			total += n
		}
		if total != st.Rows || st.Rows == 0 {
			t.Fatalf("part %+v: %d rows in row groups, Stats.Rows %d", r, total, st.Rows)
		}
		for _, row := range readRows(t, buf.Bytes()) {
			id := row[0][0].Int64()
			if seen[id] {
				t.Fatalf("row %d exported twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 20000 {
		t.Fatalf("parts hold %d distinct rows", len(seen))
	}
}

func TestCopySQL(t *testing.T) {
	cols := []parquetcopy.Column{{Name: "a"}, {Name: `we"ird`}}
	id := pgx.Identifier{"s", "t"}
	for _, tc := range []struct {
		start, end int64
		want       string
	}{
		{0, -1, `COPY (SELECT "a", "we""ird" FROM ONLY "s"."t") TO STDOUT (FORMAT binary)`},
		{0, 10, `COPY (SELECT "a", "we""ird" FROM ONLY "s"."t" WHERE ctid OPERATOR(pg_catalog.<) '(10,0)'::pg_catalog.tid) TO STDOUT (FORMAT binary)`},
		{10, 20, `COPY (SELECT "a", "we""ird" FROM ONLY "s"."t" WHERE ctid OPERATOR(pg_catalog.>=) '(10,0)'::pg_catalog.tid AND ctid OPERATOR(pg_catalog.<) '(20,0)'::pg_catalog.tid) TO STDOUT (FORMAT binary)`},
		{20, -1, `COPY (SELECT "a", "we""ird" FROM ONLY "s"."t" WHERE ctid OPERATOR(pg_catalog.>=) '(20,0)'::pg_catalog.tid) TO STDOUT (FORMAT binary)`},
	} {
		if got := parquetcopy.CopySQL(id, cols, tc.start, tc.end); got != tc.want {
			t.Errorf("CopySQL(%d, %d) = %s", tc.start, tc.end, got)
		}
	}
}

// TestCancel: a cancelled context stops the export with an error.
func TestCancel(t *testing.T) {
	conn := connect(t)
	mustExec(t, conn, "CREATE TABLE big AS SELECT g AS id, md5(g::text) AS s FROM generate_series(1, 100000) g")
	ctx, cancel := context.WithCancel(context.Background())
	id := pgx.Identifier{"big"}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	w := &cancelAfter{n: 1 << 16, cancel: cancel}
	start := time.Now()
	defer func() { t.Logf("Write returned after %v", time.Since(start)) }()
	_, err = parquetcopy.Write(ctx, conn.PgConn(), parquetcopy.CopySQL(id, cols, 0, -1), cols, w, parquetcopy.Options{RowGroupRows: 10000})
	if err == nil {
		t.Fatal("Write succeeded after its context was cancelled")
	}
	if !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "cancel") {
		t.Logf("error after cancel: %v", err)
	}
}

// cancelAfter cancels once n bytes were written.
type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.n -= len(p)
	if c.n <= 0 {
		c.cancel()
	}
	return len(p), nil
}

// TestWriterError: a failing destination fails the export with its error.
func TestWriterError(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	mustExec(t, conn, "CREATE TABLE w AS SELECT g AS id, md5(g::text) AS s FROM generate_series(1, 50000) g")
	id := pgx.Identifier{"w"}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	errFull := errors.New("disk full")
	_, err = parquetcopy.Write(ctx, conn.PgConn(), parquetcopy.CopySQL(id, cols, 0, -1), cols, &failAfter{n: 1000, err: errFull}, parquetcopy.Options{RowGroupRows: 5000})
	if !errors.Is(err, errFull) {
		t.Fatalf("got %v, want %v", err, errFull)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, f.err
	}
	return len(p), nil
}

// TestLargeArrays: batches of long arrays are cut by size, and every element comes back.
func TestLargeArrays(t *testing.T) {
	conn := connect(t)
	mustExec(t, conn, `CREATE TABLE la (id int NOT NULL, a bigint[]);
		INSERT INTO la SELECT g, CASE WHEN g % 50 = 0 THEN NULL ELSE array(SELECT g * 10000 + e FROM generate_series(1, 3000) e) END
		FROM generate_series(1, 100) g`)
	data, _, st, err := export(t, conn, "la", parquetcopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, data)
	if st.Rows != 100 || len(rows) != 100 {
		t.Fatalf("%d rows (stats %d)", len(rows), st.Rows)
	}
	for _, row := range rows {
		g := int64(row[0][0].Int32())
		vals := row[1]
		if g%50 == 0 {
			if len(vals) != 1 || !vals[0].IsNull() || vals[0].DefinitionLevel() != 0 {
				t.Fatalf("row %d: want a NULL list, got %d values", g, len(vals))
			}
			continue
		}
		if len(vals) != 3000 {
			t.Fatalf("row %d: %d elements", g, len(vals))
		}
		for e, v := range vals {
			if v.Int64() != g*10000+int64(e)+1 {
				t.Fatalf("row %d element %d: %d", g, e, v.Int64())
			}
		}
	}
}
