package parquetcopy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// PostgreSQL numeric binary format (numeric_send): int16 ndigits, int16 weight, uint16 sign,
// uint16 dscale, then ndigits base-10000 digits (int16), most significant first. The value is
// sum(digit[i] * 10000^(weight-i)); dscale is the number of decimal digits after the point.
const (
	numericPos  = 0x0000
	numericNeg  = 0x4000
	numericNaN  = 0xC000
	numericPInf = 0xD000
	numericNInf = 0xF000
)

var errNumericFormat = errors.New("malformed numeric value")

type numericHeader struct {
	ndigits int
	weight  int
	sign    uint16
	dscale  int
	digits  []byte // 2*ndigits bytes
}

func parseNumeric(b []byte) (numericHeader, error) {
	if len(b) < 8 {
		return numericHeader{}, errNumericFormat
	}
	h := numericHeader{
		ndigits: int(int16(binary.BigEndian.Uint16(b))),
		weight:  int(int16(binary.BigEndian.Uint16(b[2:]))),
		sign:    binary.BigEndian.Uint16(b[4:]),
		dscale:  int(binary.BigEndian.Uint16(b[6:])),
	}
	if h.ndigits < 0 || len(b) != 8+2*h.ndigits {
		return numericHeader{}, errNumericFormat
	}
	h.digits = b[8:]
	return h, nil
}

func (h *numericHeader) digit(i int) uint64 {
	return uint64(binary.BigEndian.Uint16(h.digits[2*i:]))
}

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

// mulAdd returns x*m + a, and whether it overflowed.
func (x u128) mulAdd(m, a uint64) (u128, bool) {
	hiHi, hiLo := bits.Mul64(x.hi, m)
	loHi, loLo := bits.Mul64(x.lo, m)
	hi, c1 := bits.Add64(hiLo, loHi, 0)
	lo, c2 := bits.Add64(loLo, a, 0)
	hi, c3 := bits.Add64(hi, 0, c2)
	return u128{hi, lo}, hiHi != 0 || c1 != 0 || c3 != 0
}

func (x u128) less(y u128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

// pow10 holds 10^0 .. 10^38.
var pow10 = func() (p [39]u128) {
	p[0] = u128{0, 1}
	for i := 1; i < len(p); i++ {
		p[i], _ = p[i-1].mulAdd(10, 0)
	}
	return p
}()

var pow10u64 = [...]uint64{1, 10, 100, 1000, 10000}

// unscaled returns the numeric as an integer count of 10^-scale units (two's complement in
// 128 bits), checking it has at most precision digits. NaN and infinities are errors.
func (h *numericHeader) unscaled(precision, scale int) (hi, lo uint64, err error) {
	switch h.sign {
	case numericPos, numericNeg:
	case numericNaN:
		return 0, 0, fmt.Errorf("NaN cannot be stored in DECIMAL(%d,%d)", precision, scale)
	case numericPInf:
		return 0, 0, fmt.Errorf("Infinity cannot be stored in DECIMAL(%d,%d)", precision, scale)
	case numericNInf:
		return 0, 0, fmt.Errorf("-Infinity cannot be stored in DECIMAL(%d,%d)", precision, scale)
	default:
		return 0, 0, errNumericFormat
	}
	// The digits are units of 10000^(weight-ndigits+1); the result counts units of 10^-scale.
	// e > 0: multiply by 10^e at the end; e < 0: the last -e decimal digits lie beyond the
	// scale and must be zero (they are for a numeric(p,s) column, whose values PostgreSQL
	// rounds to s digits). Dropping them while accumulating keeps the intermediate value
	// within 128 bits.
	e := 4*(h.weight-h.ndigits+1) + scale
	drop := max(-e, 0)
	var mag u128
	var of bool
	for i := 0; i < h.ndigits; i++ {
		d := h.digit(i)
		if d >= 10000 {
			return 0, 0, errNumericFormat
		}
		switch beyond := drop - 4*(h.ndigits-1-i); {
		case beyond <= 0:
			mag, of = mag.mulAdd(10000, d)
		case beyond >= 4:
			if d != 0 {
				return 0, 0, h.tooPrecise(precision, scale)
			}
			continue
		default:
			if d%pow10u64[beyond] != 0 {
				return 0, 0, h.tooPrecise(precision, scale)
			}
			mag, of = mag.mulAdd(pow10u64[4-beyond], d/pow10u64[beyond])
		}
		if of {
			return 0, 0, h.tooLarge(precision, scale)
		}
	}
	for e > 0 && (mag.hi|mag.lo) != 0 {
		k := min(e, 4)
		if mag, of = mag.mulAdd(pow10u64[k], 0); of {
			return 0, 0, h.tooLarge(precision, scale)
		}
		e -= k
	}
	if !mag.less(pow10[precision]) {
		return 0, 0, h.tooLarge(precision, scale)
	}
	hi, lo = mag.hi, mag.lo
	if h.sign == numericNeg {
		var b uint64
		lo, b = bits.Sub64(0, lo, 0)
		hi, _ = bits.Sub64(0, hi, b)
	}
	return hi, lo, nil
}

// tooPrecise cannot happen for a value of a numeric(p,s) column: its scale is at most s.
func (h *numericHeader) tooPrecise(precision, scale int) error {
	return fmt.Errorf("value has more than %d fractional digits, so DECIMAL(%d,%d) cannot hold it exactly", scale, precision, scale)
}

func (h *numericHeader) tooLarge(precision, scale int) error {
	return fmt.Errorf("value has more than %d digits, so DECIMAL(%d,%d) cannot hold it", precision, precision, scale)
}

// textLen is an upper bound on the length of appendText's output.
func (h *numericHeader) textLen() int {
	return 1 + 4*max(h.weight+1, 1) + 1 + h.dscale + 4
}

// appendText writes the value as PostgreSQL's numeric_out prints it: every digit, exactly.
func (h *numericHeader) appendText(dst []byte) ([]byte, error) {
	switch h.sign {
	case numericPos, numericNeg:
	case numericNaN:
		return append(dst, "NaN"...), nil
	case numericPInf:
		return append(dst, "Infinity"...), nil
	case numericNInf:
		return append(dst, "-Infinity"...), nil
	default:
		return dst, errNumericFormat
	}
	for i := 0; i < h.ndigits; i++ {
		if h.digit(i) >= 10000 {
			return dst, errNumericFormat
		}
	}
	if h.sign == numericNeg {
		dst = append(dst, '-')
	}
	// Integer part: digit groups 0..weight.
	if h.weight < 0 {
		dst = append(dst, '0')
	} else {
		for i := 0; i <= h.weight; i++ {
			var d uint64
			if i < h.ndigits {
				d = h.digit(i)
			}
			if i == 0 {
				dst = appendUint(dst, d)
			} else {
				dst = append4(dst, d)
			}
		}
	}
	if h.dscale > 0 {
		dst = append(dst, '.')
		// Fractional digit groups start at index weight+1 (negative indexes are zero groups).
		n := 0
		for i := h.weight + 1; n < h.dscale; i++ {
			var d uint64
			if i >= 0 && i < h.ndigits {
				d = h.digit(i)
			}
			var g [4]byte
			append4(g[:0], d)
			take := min(4, h.dscale-n)
			dst = append(dst, g[:take]...)
			n += take
		}
	}
	return dst, nil
}

func appendUint(dst []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}

func append4(dst []byte, d uint64) []byte {
	return append(dst, byte('0'+d/1000), byte('0'+d/100%10), byte('0'+d/10%10), byte('0'+d%10))
}
