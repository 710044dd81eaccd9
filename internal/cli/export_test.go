package cli_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
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

// export list shows the newest exports, as many as --limit asks for, as job list does.
func TestExportListLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE t (id int)`)
	dir := t.TempDir()
	var ids []string
	for _, sub := range []string{"a", "b", "c"} {
		r := e.run("export", "--table", "t", "--group", "n1", "--to", "file://"+dir+"/"+sub)
		want(t, r, 0)
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	list := func(args ...string) []deckhandtype.Export {
		t.Helper()
		r := e.run(append([]string{"export", "list", "-o", "json"}, args...)...)
		want(t, r, 0)
		var out []deckhandtype.Export
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		return out
	}
	if got := list(); len(got) != 3 {
		t.Fatalf("export list shows %d exports, want 3", len(got))
	}
	got := list("--limit", "2")
	if len(got) != 2 || strconv.FormatInt(got[0].JobID, 10) != ids[2] || strconv.FormatInt(got[1].JobID, 10) != ids[1] {
		t.Fatalf("export list --limit 2: %+v; want the exports of jobs %s and %s", got, ids[2], ids[1])
	}
	wantUsage(t, e.run("export", "list", "--limit", "0"), "--limit must be at least 1")
}

// An export as an owner the submitter is not a member of is refused naming the owner, and no
// task: the export has none yet (the check is of the command, not of a task the user wrote).
func TestExportOwnerRefusalNamesNoTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE t (id int)`)
	submitter := e.Role("submitter")
	other := e.Role("other")
	e.Exec("postgres", `GRANT deckhand_submitter TO `+pgx.Identifier{submitter}.Sanitize())
	r := deckhand(t, "", "--catalog", e.Cluster.DSN(e.DB, submitter),
		"export", "--table", "t", "--group", "n1", "--to", "file://"+t.TempDir(), "--owner", other)
	wantUsage(t, r, `submitter "`+submitter+`" is not a member of role "`+other+`" on node n1`)
	if strings.Contains(r.stderr, "task") {
		t.Errorf("the refusal names a task the user never wrote: %s", r.stderr)
	}
}
