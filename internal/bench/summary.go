package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Summary is a benchmark's figures in the order its last line gives them: key=value pairs for
// the line, one JSON object (deckhand bench -o json) for scripts, the same keys and precision
// in both.
type Summary []Figure

// Figure is one key=value of a Summary, written with Decimals digits after the point.
type Figure struct {
	Key      string
	Value    float64
	Decimals int
}

// add appends a figure.
func (s *Summary) add(key string, value float64, decimals int) {
	*s = append(*s, Figure{Key: key, Value: value, Decimals: decimals})
}

// String is the summary line: key=value pairs separated by spaces.
func (s Summary) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = f.Key + "=" + f.text()
	}
	return strings.Join(parts, " ")
}

// MarshalJSON writes the figures as one object in the line's order; a figure that is no
// number (a p99 beyond the histogram's last bucket) is null.
func (s Summary) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		if math.IsInf(f.Value, 0) || math.IsNaN(f.Value) {
			b.WriteString("null")
		} else {
			b.WriteString(f.text())
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (f Figure) text() string { return strconv.FormatFloat(f.Value, 'f', f.Decimals, 64) }
