package parquetcopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/parquet-go/parquet-go"
)

// wrongLength says that a fixed-size value came with another size.
func wrongLength(what string, got, want int) error {
	return fmt.Errorf("%s value of %d bytes, expected %d", what, got, want)
}

// decodeScalar converts one non-NULL binary value; variable-length results are copied into ar.
func decodeScalar(dst *parquet.Value, s *spec, d []byte, ar *arena) error {
	switch s.kind {
	case kInt8:
		if len(d) != 8 {
			return wrongLength("bigint", len(d), 8)
		}
		*dst = parquet.Int64Value(int64(binary.BigEndian.Uint64(d)))
		return nil
	case kInt4:
		if len(d) != 4 {
			return wrongLength("integer", len(d), 4)
		}
		*dst = parquet.Int32Value(int32(binary.BigEndian.Uint32(d)))
		return nil
	case kInt2:
		if len(d) != 2 {
			return wrongLength("smallint", len(d), 2)
		}
		*dst = parquet.Int32Value(int32(int16(binary.BigEndian.Uint16(d))))
		return nil
	case kTimestamp, kTimestamptz:
		if len(d) != 8 {
			return wrongLength("timestamp", len(d), 8)
		}
		t := int64(binary.BigEndian.Uint64(d))
		if t == math.MaxInt64 || t == math.MinInt64 {
			if t > 0 {
				return errors.New("timestamp 'infinity' cannot be exported (Parquet TIMESTAMP has no infinity)")
			}
			return errors.New("timestamp '-infinity' cannot be exported (Parquet TIMESTAMP has no infinity)")
		}
		if t > math.MaxInt64-pgEpochMicros {
			// Microseconds since 1970 in an INT64 end before PostgreSQL's timestamps do.
			return errors.New("timestamp after 294247-01-10 04:00:54.775807 UTC cannot be exported (Parquet TIMESTAMP(MICROS) ends there)")
		}
		*dst = parquet.Int64Value(t + pgEpochMicros)
		return nil
	case kText, kJSON, kBytea:
		*dst = parquet.ByteArrayValue(ar.copy(d))
		return nil
	case kJSONB:
		if len(d) < 1 || d[0] != 1 {
			return errors.New("unknown jsonb binary format version")
		}
		*dst = parquet.ByteArrayValue(ar.copy(d[1:]))
		return nil
	case kDecimal32, kDecimal64, kDecimalFLBA:
		return decodeDecimal(dst, s, d, ar)
	case kNumericText:
		return decodeNumericText(dst, d, ar)
	case kDate:
		if len(d) != 4 {
			return wrongLength("date", len(d), 4)
		}
		v := int32(binary.BigEndian.Uint32(d))
		if v == math.MaxInt32 {
			return errors.New("date 'infinity' cannot be exported (Parquet DATE has no infinity)")
		}
		if v == math.MinInt32 {
			return errors.New("date '-infinity' cannot be exported (Parquet DATE has no infinity)")
		}
		*dst = parquet.Int32Value(v + pgEpochDays)
		return nil
	case kBool:
		if len(d) != 1 {
			return wrongLength("boolean", len(d), 1)
		}
		*dst = parquet.BooleanValue(d[0] != 0)
		return nil
	case kFloat8:
		if len(d) != 8 {
			return wrongLength("double precision", len(d), 8)
		}
		*dst = parquet.DoubleValue(math.Float64frombits(binary.BigEndian.Uint64(d)))
		return nil
	case kFloat4:
		if len(d) != 4 {
			return wrongLength("real", len(d), 4)
		}
		*dst = parquet.FloatValue(math.Float32frombits(binary.BigEndian.Uint32(d)))
		return nil
	case kUUID:
		if len(d) != 16 {
			return wrongLength("uuid", len(d), 16)
		}
		*dst = parquet.FixedLenByteArrayValue(ar.copy(d))
		return nil
	}
	return fmt.Errorf("internal error: no decoder for kind %d", s.kind)
}

func (a *arena) copy(d []byte) []byte {
	if len(d) == 0 {
		return empty
	}
	b := a.alloc(len(d))
	copy(b, d)
	return b
}

// decodeDecimal and decodeNumericText are kept out of decodeScalar so that its frame stays
// small for the common types.
func decodeDecimal(dst *parquet.Value, s *spec, d []byte, ar *arena) error {
	h, err := parseNumeric(d)
	if err != nil {
		return err
	}
	hi, lo, err := h.unscaled(s.precision, s.scale)
	if err != nil {
		return err
	}
	switch s.kind {
	case kDecimal32:
		*dst = parquet.Int32Value(int32(lo))
	case kDecimal64:
		*dst = parquet.Int64Value(int64(lo))
	default:
		var be [16]byte
		binary.BigEndian.PutUint64(be[:], hi)
		binary.BigEndian.PutUint64(be[8:], lo)
		*dst = parquet.FixedLenByteArrayValue(ar.copy(be[16-s.flbaLen:]))
	}
	return nil
}

func decodeNumericText(dst *parquet.Value, d []byte, ar *arena) error {
	h, err := parseNumeric(d)
	if err != nil {
		return err
	}
	n := h.textLen()
	buf := ar.alloc(n)
	out, err := h.appendText(buf[:0])
	if err != nil {
		ar.unalloc(n)
		return err
	}
	if len(out) > n || &out[0] != &buf[0] {
		panic("parquetcopy: numeric text longer than its bound")
	}
	ar.unalloc(n - len(out))
	*dst = parquet.ByteArrayValue(buf[:len(out)])
	return nil
}
