package parquetcopy

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/encoding"
)

// FieldDescription describes one exported column for the export manifest.
type FieldDescription struct {
	Name         string `json:"name"`
	PostgresType string `json:"postgres_type"`
	ParquetType  string `json:"parquet_type"`
	Nullable     bool   `json:"nullable"`
}

// Schema returns the Parquet schema Write uses for cols: one top-level field per column, in
// column order.
func Schema(cols []Column) (*parquet.Schema, error) {
	specs, err := specsOf(cols)
	if err != nil {
		return nil, err
	}
	return schemaOf(cols, specs), nil
}

func schemaOf(cols []Column, specs []spec) *parquet.Schema {
	fields := make([]parquet.Field, len(cols))
	for i, c := range cols {
		fields[i] = &field{Node: nodeOf(specs[i]), name: c.Name, index: i}
	}
	return parquet.NewSchema("schema", &group{fields: fields})
}

func leafOf(s spec) parquet.Node {
	switch s.kind {
	case kBool:
		return parquet.Leaf(parquet.BooleanType)
	case kInt2:
		return parquet.Int(16)
	case kInt4:
		return parquet.Leaf(parquet.Int32Type)
	case kInt8:
		return parquet.Leaf(parquet.Int64Type)
	case kFloat4:
		return parquet.Leaf(parquet.FloatType)
	case kFloat8:
		return parquet.Leaf(parquet.DoubleType)
	case kDecimal32:
		return parquet.Decimal(s.scale, s.precision, parquet.Int32Type)
	case kDecimal64:
		return parquet.Decimal(s.scale, s.precision, parquet.Int64Type)
	case kDecimalFLBA:
		return parquet.Decimal(s.scale, s.precision, parquet.FixedLenByteArrayType(s.flbaLen))
	case kNumericText, kText:
		return parquet.String()
	case kJSON, kJSONB:
		return parquet.JSON()
	case kBytea:
		return parquet.Leaf(parquet.ByteArrayType)
	case kDate:
		return parquet.Date()
	case kTimestamp:
		return parquet.TimestampAdjusted(parquet.Microsecond, false)
	case kTimestamptz:
		return parquet.TimestampAdjusted(parquet.Microsecond, true)
	case kUUID:
		return parquet.UUID()
	}
	panic("parquetcopy: no leaf for kind " + strconv.Itoa(int(s.kind)))
}

func nodeOf(s spec) parquet.Node {
	n := leafOf(s)
	if s.list {
		n = parquet.List(parquet.Optional(n))
	}
	if s.optional {
		n = parquet.Optional(n)
	}
	return n
}

func parquetTypeName(s spec) string {
	var t string
	switch s.kind {
	case kBool:
		t = "BOOLEAN"
	case kInt2:
		t = "INT32 (INT(16,true))"
	case kInt4:
		t = "INT32"
	case kInt8:
		t = "INT64"
	case kFloat4:
		t = "FLOAT"
	case kFloat8:
		t = "DOUBLE"
	case kDecimal32:
		t = fmt.Sprintf("INT32 (DECIMAL(%d,%d))", s.precision, s.scale)
	case kDecimal64:
		t = fmt.Sprintf("INT64 (DECIMAL(%d,%d))", s.precision, s.scale)
	case kDecimalFLBA:
		t = fmt.Sprintf("FIXED_LEN_BYTE_ARRAY(%d) (DECIMAL(%d,%d))", s.flbaLen, s.precision, s.scale)
	case kNumericText, kText:
		t = "BYTE_ARRAY (STRING)"
	case kJSON, kJSONB:
		t = "BYTE_ARRAY (JSON)"
	case kBytea:
		t = "BYTE_ARRAY"
	case kDate:
		t = "INT32 (DATE)"
	case kTimestamp:
		t = "INT64 (TIMESTAMP(MICROS,false))"
	case kTimestamptz:
		t = "INT64 (TIMESTAMP(MICROS,true))"
	case kUUID:
		t = "FIXED_LEN_BYTE_ARRAY(16) (UUID)"
	}
	if s.list {
		t = "LIST<" + t + ">"
	}
	return t
}

// SchemaDescription describes the Parquet field each column becomes, for the export manifest.
func SchemaDescription(cols []Column) ([]FieldDescription, error) {
	specs, err := specsOf(cols)
	if err != nil {
		return nil, err
	}
	out := make([]FieldDescription, len(cols))
	for i, c := range cols {
		pg := c.TypeName
		if c.Domain != "" {
			pg = c.Domain
		}
		out[i] = FieldDescription{Name: c.Name, PostgresType: pg, ParquetType: parquetTypeName(specs[i]), Nullable: specs[i].optional}
	}
	return out, nil
}

// group is a Parquet group that keeps its fields in the given order (parquet.Group sorts them
// by name).
type group struct {
	fields []parquet.Field
}

var groupType = parquet.Group{}.Type()

func (g *group) ID() int                     { return 0 }
func (g *group) String() string              { return parquet.NewSchema("", g).String() }
func (g *group) Type() parquet.Type          { return groupType }
func (g *group) Optional() bool              { return false }
func (g *group) Repeated() bool              { return false }
func (g *group) Required() bool              { return true }
func (g *group) Leaf() bool                  { return false }
func (g *group) Fields() []parquet.Field     { return g.fields }
func (g *group) Encoding() encoding.Encoding { return nil }
func (g *group) Compression() compress.Codec { return nil }

// GoType is a struct with one field per column, named F0, F1, ... and tagged with the column
// name; parquet-go only uses it for reflection-based reads and writes, which export does not do.
func (g *group) GoType() reflect.Type {
	sf := make([]reflect.StructField, len(g.fields))
	for i, f := range g.fields {
		sf[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: f.GoType(),
			Tag:  reflect.StructTag(`parquet:` + strconv.Quote(f.Name())),
		}
	}
	return reflect.StructOf(sf)
}

type field struct {
	parquet.Node
	name  string
	index int
}

func (f *field) Name() string { return f.name }

func (f *field) Value(base reflect.Value) reflect.Value {
	if base.Kind() == reflect.Struct && f.index < base.NumField() {
		return base.Field(f.index)
	}
	return reflect.Value{}
}
