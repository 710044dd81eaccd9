package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
	}{{"", FormatTable}, {"table", FormatTable}, {"json", FormatJSON}, {" JSON ", FormatJSON}} {
		if got, err := ParseFormat(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	_, err := ParseFormat("yaml")
	if err == nil || err.Error() != `unknown output format "yaml" (want table or json)` {
		t.Errorf("ParseFormat(yaml) error = %v", err)
	}
	if ExitCode(err) != ExitUsage {
		t.Errorf("ExitCode = %d, want %d", ExitCode(err), ExitUsage)
	}
}

func TestPrintJSON(t *testing.T) {
	var buf bytes.Buffer
	v := struct {
		ID  int    `json:"id"`
		SQL string `json:"sql"`
	}{7, "select a < b"}
	if err := PrintJSON(&buf, v); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"id\": 7,\n  \"sql\": \"select a < b\"\n}\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
	if err := PrintJSON(&buf, make(chan int)); err == nil {
		t.Error("PrintJSON(chan) succeeded")
	}
}

func TestPrintTable(t *testing.T) {
	var buf bytes.Buffer
	err := PrintTable(&buf, []string{"id", "state", "description"}, [][]string{
		{"1", "running", "vacuum\tall"},
		{"12", "finished", "line one\nline two"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "ID  STATE     DESCRIPTION\n" +
		"1   running   vacuum all\n" +
		"12  finished  line one line two\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := PrintTable(&buf, []string{"name"}, nil); err != nil || buf.String() != "NAME\n" {
		t.Errorf("empty table = %q, %v", buf.String(), err)
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf)
	if p.Terminal() {
		t.Fatal("bytes.Buffer taken for a terminal")
	}
	p.Update("1/3")
	p.Update("2/3")
	p.Done("done 3/3")
	if buf.String() != "done 3/3\n" {
		t.Errorf("not a terminal: got %q", buf.String())
	}

	buf.Reset()
	p = &Progress{w: &buf, terminal: true}
	p.Update("1/3")
	p.Update("2/3\n")
	p.Done("done 3/3")
	want := "\r1/3\x1b[K\r2/3 \x1b[K\r\x1b[Kdone 3/3\n"
	if buf.String() != want {
		t.Errorf("terminal: got %q, want %q", buf.String(), want)
	}
}

func TestProgressFiles(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if NewProgress(f).Terminal() {
		t.Error("regular file taken for a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if NewProgress(w).Terminal() {
		t.Error("pipe taken for a terminal")
	}
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		done, total, width int
		want               string
	}{
		{5, 10, 10, "[#####.....] 5/10"},
		{0, 10, 10, "[..........] 0/10"},
		{10, 10, 10, "[##########] 10/10"},
		{1, 3, 6, "[##....] 1/3"},
		{12, 10, 4, "[####] 12/10"},
		{-1, 10, 4, "[....] -1/10"},
		{0, 0, 4, "[....] 0/0"},
		{1, 2, 0, "[##########..........] 1/2"},
	} {
		if got := Bar(tc.done, tc.total, tc.width); got != tc.want {
			t.Errorf("Bar(%d, %d, %d) = %q, want %q", tc.done, tc.total, tc.width, got, tc.want)
		}
	}
}

func TestExitErrors(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name    string
		err     error
		code    int
		message string
	}{
		{"nil", nil, 0, ""},
		{"plain", base, 1, "boom"},
		{"usage", Usage("bad flag %q", "-x"), 2, `bad flag "-x"`},
		{"failed", Failed("job %d failed", 4), 1, "job 4 failed"},
		{"timeout", Timeout("job %d: still running after %s", 4, "10s"), 3, "job 4: still running after 10s"},
		{"wrapped", fmt.Errorf("wait: %w", Timeout("gave up")), 3, "wait: gave up"},
		{"wraps cause", Usage("read spec: %w", base), 2, "read spec: boom"},
		{"no inner error", &ExitError{Code: 4}, 4, "exit status 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.code {
				t.Errorf("ExitCode = %d, want %d", got, tc.code)
			}
			if tc.err != nil && tc.err.Error() != tc.message {
				t.Errorf("Error() = %q, want %q", tc.err.Error(), tc.message)
			}
		})
	}
	if err := Usage("read spec: %w", base); !errors.Is(err, base) {
		t.Error("Usage does not unwrap to its %w cause")
	}
}
