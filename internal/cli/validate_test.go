package cli_test

import (
	"strings"
	"testing"
)

// A task of a built-in kind is checked at submission as its executor would check it: a
// payload it would refuse, a timeout PostgreSQL cannot take, SQL where a payload belongs (or
// the reverse) are refused with one line and exit 2, and nothing is written.
func TestSubmitRefusesBadTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.AddNode("n2", 4)
	job := func(task string) string { return `{"tasks": [` + task + `]}` }
	for _, tc := range []struct {
		name, spec string
		fragments  []string
	}{
		{"drop without payload", job(`{"name": "d", "kind": "drop", "node": "n1"}`),
			[]string{`task "d": drop: payload is required`}},
		{"drop with null payload", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": null}`),
			[]string{`task "d": drop: payload is required`}},
		{"drop unknown field", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": {"tables": ["t"], "cascade": true}}`),
			[]string{`task "d": drop: payload`, `unknown field "cascade"`}},
		{"drop name with semicolon", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": {"tables": ["x;y"]}}`),
			[]string{`task "d": drop: invalid name "x;y"`}},
		{"drop no tables", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": {"tables": []}}`),
			[]string{`task "d": drop: payload names no tables`}},
		{"drop payload not an object", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": ["t"]}`),
			[]string{`task "d": drop: payload`}},
		{"drop with sql", job(`{"name": "d", "kind": "drop", "node": "n1", "sql": "DROP TABLE t", "payload": {"tables": ["t"]}}`),
			[]string{`task "d": kind "drop" does not take sql`}},
		{"drop lock_timeout too long", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": {"tables": ["t"], "lock_timeout": "600h"}}`),
			[]string{`task "d": drop: lock_timeout must be at most`, "2147483647ms"}},
		{"drop lock_timeout negative", job(`{"name": "d", "kind": "drop", "node": "n1", "payload": {"tables": ["t"], "lock_timeout": "-1s"}}`),
			[]string{`task "d": drop: lock_timeout must be positive`}},
		{"move unknown field", job(`{"name": "m", "kind": "move", "payload": {"schema": "app", "from": "g1", "to": "g2", "force": true}}`),
			[]string{`task "m": move: payload`, `unknown field "force"`}},
		{"move bad name", job(`{"name": "m", "kind": "move", "payload": {"tables": [["app", "t"], ["app", "t"]], "from": "g1", "to": "g2"}}`),
			[]string{`task "m": move: table app.t is given twice`}},
		{"move without payload", job(`{"name": "m", "kind": "move"}`),
			[]string{`task "m": move: payload is required`}},
		{"move to its own group", job(`{"name": "m", "kind": "move", "payload": {"schema": "app", "from": "g1", "to": "g1"}}`),
			[]string{`task "m": move: --from and --to are both group g1`}},
		{"move max_write_block too long", job(`{"name": "m", "kind": "move", "payload": {"schema": "app", "from": "g1", "to": "g2", "max_write_block": "9999h"}}`),
			[]string{`task "m": move: --max-write-block must be at most`}},
		{"sql with payload", job(`{"name": "s", "node": "n1", "sql": "SELECT 1", "payload": {"tables": ["t"]}}`),
			[]string{`task "s": kind "sql" does not take a payload`}},
		{"timeout beyond statement_timeout", job(`{"name": "s", "node": "n1", "sql": "SELECT 1", "timeout": "600h"}`),
			[]string{`task "s": timeout must be at most`, "2147483647ms"}},
		{"timeout negative", job(`{"name": "s", "node": "n1", "sql": "SELECT 1", "timeout": "-1m"}`),
			[]string{`task "s": timeout must be positive`}},
		{"search_path as a setting", `{"settings": {"search_path": "public"}, "tasks": [{"name": "s", "node": "n1", "sql": "SELECT 1"}]}`,
			[]string{`settings: "search_path" is set by deckhand`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.runIn(tc.spec, "job", "submit", "-")
			wantUsage(t, r, tc.fragments...)
			if strings.Contains(r.stderr, "s3cr3t") {
				t.Errorf("the refusal repeats the password: %q", r.stderr)
			}
		})
	}

	// deckhand drop builds the same payload: its refusals are the same.
	wantUsage(t, e.run("drop", "--node", "n1", "x;y"), `invalid name "x;y"`)
	wantUsage(t, e.run("drop", "--node", "n1", "--lock-timeout", "600h", "t"), "lock_timeout must be at most")
	wantUsage(t, e.run("drop", "--node", "n1", "--lock-timeout", "-1s", "t"), "must not be negative")
	wantUsage(t, e.run("drop", "--node", "n1", "--timeout", "600h", "t"), "timeout must be at most")

	if r := e.run("job", "list", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("refused jobs were written: job list -o json = %s", r)
	}
}
