package deckhandtype

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL WAL position; positions compare as numbers.
type LSN uint64

// ParseLSN reads the textual form of a pg_lsn, such as "16/B374D848".
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }
