package cli_test

import (
	"strings"
	"testing"
)

// A --part-size whose bytes do not fit in 64 bits is refused as too large, instead of wrapping
// around into some other size (or into a negative one, refused as "at least 8kB").
func TestExportRefusesAPartSizeTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, size := range []string{"99999999999TB", "8388608TB", "9223372036854775807kB", "99999999999999999999"} {
		t.Run(size, func(t *testing.T) {
			r := e.run("export", "--table", "t", "--group", "g", "--to", "file:///tmp/exportwalk-none", "--part-size", size)
			wantUsage(t, r, "--part-size", "too large")
		})
	}
	r := e.run("export", "list", "-o", "json")
	want(t, r, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("a refused export was recorded: %s", r.stdout)
	}
}
