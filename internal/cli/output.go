package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
)

// Format is how list and show commands print their results (-o).
type Format string

const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
)

// ParseFormat reads an -o value; "" means table. An unknown format is a usage error.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case "", FormatTable:
		return FormatTable, nil
	case FormatJSON:
		return FormatJSON, nil
	}
	return "", Usage("unknown output format %q (want table or json)", s)
}

// PrintJSON writes v as indented JSON followed by a newline. HTML characters are not escaped,
// so SQL text such as "a < b" reads as written.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// PrintTable writes rows as aligned columns under upper-cased headers. Tabs and line breaks
// inside cells become spaces so that each row stays on one line.
func PrintTable(w io.Writer, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	upper := make([]string, len(headers))
	for i, h := range headers {
		upper[i] = strings.ToUpper(cell(h))
	}
	fmt.Fprintln(tw, strings.Join(upper, "\t"))
	for _, row := range rows {
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = cell(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

var cellReplacer = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")

// cell is s on one line, with any other control character escaped (safe.go).
func cell(s string) string { return safeText(cellReplacer.Replace(s)) }

// Progress renders a single status line that rewrites itself on a terminal. When the writer
// is not a terminal (a pipe, a file), Update prints nothing and only Done's final line appears,
// so logs and scripts see one clean line. It is safe for concurrent use.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
}

// NewProgress returns a Progress writing to w, which counts as a terminal when it is an
// *os.File on a character device (and TERM is not "dumb").
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, terminal: isTerminal(w)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Terminal reports whether the progress line is being drawn.
func (p *Progress) Terminal() bool { return p.terminal }

// Update replaces the current line with line on a terminal; otherwise it does nothing.
// Keep lines shorter than the terminal is wide: a wrapped line cannot be rewritten.
func (p *Progress) Update(line string) {
	if !p.terminal {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r", cell(line), "\x1b[K")
}

// Done ends the progress: it replaces the current line with final (or just prints final,
// when not on a terminal) and moves to the next line.
func (p *Progress) Done(final string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintln(p.w, safeText(final))
}

// Clear erases the progress line on a terminal and prints nothing otherwise: for when the
// error that follows says all there is to say.
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// Bar renders done out of total as a bar width cells wide followed by the count,
// e.g. Bar(5, 10, 10) is "[#####.....] 5/10". A width below 1 means 20.
func Bar(done, total, width int) string {
	if width < 1 {
		width = 20
	}
	filled := 0
	if total > 0 {
		filled = min(max(done, 0), total) * width / total
	}
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
}

// Exit codes of deckhand commands (part of the user-facing contract).
const (
	ExitOK      = 0
	ExitFailed  = 1 // the operation was tried and failed
	ExitUsage   = 2 // bad usage or input, or a request the object's state refuses
	ExitTimeout = 3 // gave up waiting
	// ExitDuplicate: refused because an unfinished job holds the key; that job's id is on
	// standard output (when the caller may see it) so that a script can wait for it.
	ExitDuplicate = 4
)

// ExitError is an error that decides the process exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usage returns a bad-usage error (exit code 2); format and args are as for fmt.Errorf.
func Usage(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Failed returns an operation-failed error (exit code 1); format and args are as for fmt.Errorf.
func Failed(format string, args ...any) error {
	return &ExitError{Code: ExitFailed, Err: fmt.Errorf(format, args...)}
}

// Timeout returns a timed-out error (exit code 3); format and args are as for fmt.Errorf.
func Timeout(format string, args ...any) error {
	return &ExitError{Code: ExitTimeout, Err: fmt.Errorf(format, args...)}
}

// ExitCode is the process exit code for err: 0 for nil, the code of the first ExitError
// in its chain, else 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if ee, ok := errors.AsType[*ExitError](err); ok {
		return ee.Code
	}
	return ExitFailed
}

// done reports what a command that changes something did: with -o json as one JSON object on
// standard output (what a script reads), else as one line on standard error (for whoever
// watches), keeping standard output for ids and listings.
func (a *app) done(fields map[string]any, line string) error {
	if a.json() {
		return PrintJSON(a.stdout, fields)
	}
	_, err := fmt.Fprintln(a.stderr, line)
	return err
}
