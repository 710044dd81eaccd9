package deckhandtype

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL WAL position; positions compare as numbers.
type LSN uint64

// ParseLSN reads the textual form of a pg_lsn, such as "16/B374D848": as pg_lsn's input does,
// one to eight hexadecimal digits on each side of the slash, and nothing else.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || !lsnHalf(hi) || !lsnHalf(lo) {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	h, _ := strconv.ParseUint(hi, 16, 32)
	l, _ := strconv.ParseUint(lo, 16, 32)
	return LSN(h<<32 | l), nil
}

func lsnHalf(s string) bool {
	if len(s) < 1 || len(s) > 8 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
			return false
		}
	}
	return true
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }
