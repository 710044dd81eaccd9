package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Text the CLI prints comes from other people: job descriptions, task names, SQL, errors
// that a task raised on its node (RAISE EXCEPTION E'\x1b]...'), schedule errors. Printed as
// it is, a control character in it is a command to the terminal of whoever reads it, an
// admin listing every role's jobs: escape sequences that rewrite what the screen shows
// (a failed job shown finished), set the window title, or write the clipboard. So everything
// the CLI writes goes through safeWriter, which shows each control character other than a
// line break or a tab as its \uXXXX escape (bidirectional formatting characters too):
// readable on a terminal, and, inside a JSON string, the same character (encoding/json
// escapes the other control characters itself).

// safeWriter writes to w with control characters escaped. A rune split between two writes
// is held until the next one completes it.
type safeWriter struct {
	w       io.Writer
	pending []byte
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

func (s *safeWriter) Write(p []byte) (int, error) {
	buf := append(s.pending, p...)
	s.pending = nil
	var out strings.Builder
	for i := 0; i < len(buf); {
		if !utf8.FullRune(buf[i:]) {
			s.pending = append([]byte(nil), buf[i:]...)
			break
		}
		r, n := utf8.DecodeRune(buf[i:])
		if r != utf8.RuneError || n > 1 {
			out.WriteString(safeRune(r))
		} else {
			out.WriteByte(buf[i]) // not UTF-8: passed on as it is, as before
		}
		i += n
	}
	if _, err := io.WriteString(s.w, out.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// safeRune is r, or its escape if it is a control character other than a line break or tab.
func safeRune(r rune) string {
	if r == '\n' || r == '\t' || !isControl(r) {
		return string(r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// isControl: C0, DEL and C1, which terminals act on, and the bidirectional formatting
// characters, with which text shows in another order than it reads (a description whose
// "dehsinif" shows as "finished"; a task's SQL that shows other than what runs).
func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || isBidiFormat(r)
}

// isBidiFormat: the explicit directional marks, embeddings, overrides and isolates.
func isBidiFormat(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// safeText is s with its control characters escaped, line breaks and tabs included: for
// what a line of its own shows, such as the progress line, which writes to the terminal
// directly.
func safeText(s string) string {
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
