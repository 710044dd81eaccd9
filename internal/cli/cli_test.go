package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// result is what one deckhand command did.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return "deckhand " + strings.Join(r.args, " ") + ": exit " + strconv.Itoa(r.code) +
		"\nstdout: " + r.stdout + "\nstderr: " + r.stderr
}

// deckhand runs the command line in-process with stdin and args.
func deckhand(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr testenv.Buffer
	code := cli.Main(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// env is a test catalog with the CLI pointed at it.
type env struct {
	*testenv.Env
	t *testing.T
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{Env: testenv.New(t, drop.Feature(), move.Feature(), export.Feature()), t: t}
}

// run runs deckhand against the env's catalog as the superuser.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return deckhand(e.t, "", append([]string{"--catalog", e.DSN}, args...)...)
}

// runIn is run with standard input.
func (e *env) runIn(stdin string, args ...string) result {
	e.t.Helper()
	return deckhand(e.t, stdin, append([]string{"--catalog", e.DSN}, args...)...)
}

// worker starts an in-process worker with its own logger (so that it never writes into a
// command's captured stderr) and a short shutdown grace.
func (e *env) worker() {
	e.t.Helper()
	e.Worker(engine.Config{
		Concurrency:   4,
		ShutdownGrace: 500 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// want fails the test unless r exited with code.
func want(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
}

// wantUsage checks the contract for bad input: exit 2, nothing on stdout and exactly one line
// on stderr containing every fragment.
func wantUsage(t *testing.T, r result, fragments ...string) {
	t.Helper()
	wantOneLineError(t, r, cli.ExitUsage, fragments...)
}

func wantOneLineError(t *testing.T, r result, code int, fragments ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	if r.stdout != "" {
		t.Errorf("%v: stdout should be empty, got %q", r.args, r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "deckhand: ") || !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("%v: stderr should be one line \"deckhand: reason\", got %q", r.args, r.stderr)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stderr, f) {
			t.Errorf("%v: stderr %q does not mention %q", r.args, r.stderr, f)
		}
	}
}

// jobID reads the job id a submit or run printed: the id alone on one line.
func jobID(t *testing.T, r result) string {
	t.Helper()
	want(t, r, 0)
	if r.stderr != "" {
		t.Errorf("%v: stderr should be empty, got %q", r.args, r.stderr)
	}
	id := strings.TrimSuffix(r.stdout, "\n")
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 || r.stdout != id+"\n" {
		t.Fatalf("stdout should be the job id alone on one line, got %q", r.stdout)
	}
	return id
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	want(t, r, 0)
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v: output is not the expected JSON: %v\n%s", r.args, err, r.stdout)
	}
	return v
}

// jobJSON is the part of `job show -o json` that DESIGN §6 promises, read without the Go
// types so that a renamed field fails here.
type jobJSON struct {
	ID    *int64  `json:"id"`
	State *string `json:"state"`
	Tasks []struct {
		Name      *string         `json:"name"`
		State     *string         `json:"state"`
		Attempts  *int            `json:"attempts"`
		LastError json.RawMessage `json:"last_error"`
	} `json:"tasks"`
	Attempts []struct {
		Task     string `json:"task"`
		Attempt  int    `json:"attempt"`
		Outcome  string `json:"outcome"`
		SQLState string `json:"sqlstate"`
		Message  string `json:"message"`
	} `json:"attempts"`
}

func (e *env) show(id string) jobJSON {
	e.t.Helper()
	r := e.run("job", "show", id, "-o", "json")
	j := decode[jobJSON](e.t, r)
	if j.ID == nil || j.State == nil || j.Tasks == nil {
		e.t.Fatalf("job show -o json lacks id, state or tasks: %s", r.stdout)
	}
	if strconv.FormatInt(*j.ID, 10) != id {
		e.t.Fatalf("job show %s printed job %d", id, *j.ID)
	}
	var doc struct {
		Tasks []map[string]json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		e.t.Fatal(err)
	}
	for _, task := range doc.Tasks {
		for _, k := range []string{"name", "state", "attempts", "last_error"} {
			if _, ok := task[k]; !ok {
				e.t.Errorf("job show -o json: task lacks %q: %s", k, r.stdout)
			}
		}
	}
	return j
}

type lastError struct {
	SQLState string `json:"sqlstate"`
	Message  string `json:"message"`
}

func (e *env) listJobs(args ...string) []deckhandtype.Job {
	e.t.Helper()
	return decode[[]deckhandtype.Job](e.t, e.run(append([]string{"job", "list", "-o", "json"}, args...)...))
}

// A fresh database is refused with a pointer to `deckhand init`; init is idempotent.
func TestInit(t *testing.T) {
	t.Parallel()
	cl := pgtest.Shared(t)
	dsn := cl.DSN(pgtest.NewDatabase(t), "postgres")

	for _, args := range [][]string{{"node", "list"}, {"job", "list"}, {"job", "show", "1"}} {
		r := deckhand(t, "", append([]string{"--catalog", dsn}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "not initialised") || !strings.Contains(r.stderr, "deckhand init") {
			t.Errorf("before init, want a failure telling to run `deckhand init`, got %s", r)
		}
		if strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("want a one-line reason, got %q", r.stderr)
		}
	}

	version := strconv.Itoa(catalog.SchemaVersion())
	r := deckhand(t, "", "--catalog", dsn, "init")
	want(t, r, 0)
	if !strings.Contains(r.stdout, "upgraded to schema version "+version) {
		t.Errorf("first init: %s", r)
	}
	r = deckhand(t, "", "--catalog", dsn, "init")
	want(t, r, 0)
	if !strings.Contains(r.stdout, "up to date") || !strings.Contains(r.stdout, version) {
		t.Errorf("second init should say up to date: %s", r)
	}
	out := decode[struct {
		SchemaVersion *int  `json:"schema_version"`
		Applied       []int `json:"applied"`
	}](t, deckhand(t, "", "--catalog", dsn, "init", "-o", "json"))
	if out.SchemaVersion == nil || *out.SchemaVersion != catalog.SchemaVersion() || out.Applied == nil || len(out.Applied) != 0 {
		t.Errorf("init -o json = %+v, want schema_version %s and applied []", out, version)
	}
	if jobs := decode[[]deckhandtype.Job](t, deckhand(t, "", "--catalog", dsn, "job", "list", "-o", "json")); len(jobs) != 0 {
		t.Errorf("after init: jobs %v", jobs)
	}
}

// Without --catalog or DECKHAND_CATALOG, commands that need the catalog refuse with exit 2.
func TestNoCatalog(t *testing.T) {
	t.Setenv("DECKHAND_CATALOG", "")
	for _, args := range [][]string{{"init"}, {"node", "list"}, {"job", "list", "-o", "json"}, {"job", "show", "1"},
		{"job", "wait", "1"}, {"job", "run", "--node", "n1", "SELECT 1"}, {"serve"}} {
		wantUsage(t, deckhand(t, "", args...), "no catalog configured", "--catalog", "DECKHAND_CATALOG")
	}
	// The spec is read and checked before the catalog is needed.
	wantUsage(t, deckhand(t, `{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"}]}`, "job", "submit", "-"),
		"no catalog configured")
}

// Usage errors exit 2 with one line, before any catalog is contacted (the catalog given does
// not exist, so reaching it would fail with exit 1).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	bad := "host=/nonexistent dbname=nowhere connect_timeout=1"
	for _, tc := range []struct {
		args      []string
		fragments []string
	}{
		{[]string{"node", "list", "--bogus"}, []string{"unknown flag: --bogus"}},
		{[]string{"--bogus"}, []string{"unknown flag: --bogus"}},
		{[]string{"node", "list", "-o", "yaml"}, []string{`unknown output format "yaml"`}},
		{[]string{"node", "list", "--log-level", "loud"}, []string{`--log-level "loud": want debug, info, warn or error`}},
		{[]string{"bogus"}, []string{`unknown command "bogus"`}},
		{[]string{"job", "lst"}, []string{`unknown command "lst" for "deckhand job"`, "list"}},
		{[]string{"node", "ad", "n1"}, []string{`unknown command "ad" for "deckhand node"`}},
		{[]string{"job", "show", "abc"}, []string{`job id must be a positive integer, got "abc"`}},
		{[]string{"job", "show", "0"}, []string{"job id must be a positive integer"}},
		{[]string{"job", "show"}, []string{"expected a job ID, got 0 argument(s)"}},
		{[]string{"job", "wait", "abc"}, []string{"job id must be a positive integer"}},
		{[]string{"job", "wait", "1", "--timeout", "soon"}, []string{"--timeout"}},
		{[]string{"job", "wait", "1", "--timeout", "-1s"}, []string{"--timeout must not be negative"}},
		{[]string{"job", "cancel", "1.5"}, []string{"job id must be a positive integer"}},
		{[]string{"job", "cancel", "-1"}, []string{`"-1" is not a flag`, "IDs are positive integers"}},
		{[]string{"job", "retry", "x"}, []string{"job id must be a positive integer"}},
		{[]string{"job", "run", "SELECT 1"}, []string{"--node is required"}},
		{[]string{"job", "run", "--node", "n1"}, []string{"expected the SQL text"}},
		{[]string{"job", "submit"}, []string{"expected a spec FILE or - for standard input"}},
		{[]string{"job", "submit", filepath.Join(t.TempDir(), "missing.json")}, []string{"read spec", "no such file"}},
		{[]string{"job", "list", "--state", "finish"}, []string{`unknown job state "finish"`, "finished"}},
		{[]string{"job", "list", "--limit", "0"}, []string{"--limit must be at least 1"}},
		{[]string{"job", "list", "--limit", "-3"}, []string{"--limit must be at least 1"}},
		{[]string{"job", "list", "--before", "-3"}, []string{"--before must be a job id, got -3"}},
		{[]string{"cleanup", "list", "--job", "-3"}, []string{"--job must be a job id, got -3"}},
		{[]string{"node", "add", "n1", "--dsn", "host=x", "--max-tasks", "0"}, []string{"--max-tasks must be at least 1"}},
		{[]string{"node", "add", "n1"}, []string{"--dsn is required"}},
		{[]string{"node", "add", "--dsn", "host=x"}, []string{"expected NAME"}},
		{[]string{"node", "remove"}, []string{"expected NAME"}},
		{[]string{"export", "--table", "t", "--group", "g", "--to", "file:///x", "--max-attempts", "0"}, []string{"--max-attempts must be between 1 and 1000, got 0"}},
		{[]string{"move", "--schema", "s", "--from", "g1", "--to", "g2", "--max-write-block", "0s"}, []string{"--max-write-block must be positive, got 0s"}},
		{[]string{"move", "--schema", "s", "--from", "g1", "--to", "g2", "--max-write-block", "-1s"}, []string{"--max-write-block must be positive, got -1s"}},
		// A stray argument to a command that takes none is bad usage too, not a failure.
		{[]string{"placements", "tenant_1"}, []string{`unknown command "tenant_1" for "deckhand placements"`, "--help"}},
		{[]string{"move", "--schema", "s", "--from", "g1", "--to", "g2", "extra"}, []string{`unknown command "extra" for "deckhand move"`}},
		{[]string{"job", "list", "running"}, []string{`unknown command "running" for "deckhand job list"`}},
		{[]string{"cleanup", "run", "now"}, []string{`unknown command "now" for "deckhand cleanup run"`}},
		{[]string{"init", "x"}, []string{`unknown command "x" for "deckhand init"`}},
	} {
		wantUsage(t, deckhand(t, "", append([]string{"--catalog", bad}, tc.args...)...), tc.fragments...)
	}
	// A group command alone prints its help and succeeds.
	r := deckhand(t, "", "job")
	want(t, r, 0)
	if !strings.Contains(r.stdout, "submit") || !strings.Contains(r.stdout, "wait") {
		t.Errorf("deckhand job should list its subcommands: %s", r)
	}
	// A catalog conninfo that cannot be parsed is bad input (2), without its password.
	for _, dsn := range []string{"garbage", "host=x password=s3cr3t port=abc", "host=x password = s3cr3t port=abc", "postgres://u:s3cr3t@x:abc/db"} {
		r := deckhand(t, "", "--catalog", dsn, "node", "list")
		wantUsage(t, r, "catalog DSN", "cannot parse")
		wantUsage(t, deckhand(t, "", "--catalog", dsn, "init"), "catalog DSN", "cannot parse")
		if strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("the refusal repeats the password: %q", r.stderr)
		}
	}
	// An unreachable catalog is an operational failure (1), not bad usage.
	wantOneLineError(t, deckhand(t, "", "--catalog", bad, "node", "list"), cli.ExitFailed, "connect to catalog")
}

func TestNodeCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := pgtest.NewDatabase(t)
	dsn := e.Cluster.DSN(db, "postgres")

	r := e.run("node", "add", "n1", "--dsn", dsn, "--group", "g1", "--max-tasks", "2")
	want(t, r, 0)
	if r.stdout != "" || !strings.Contains(r.stderr, "node n1 registered") {
		t.Errorf("node add: %s", r)
	}
	want(t, e.run("node", "add", "n2", "--dsn", dsn), 0)

	nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json"))
	byName := map[string]deckhandtype.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	if n1 := byName["n1"]; len(nodes) != 2 || n1.DSN != dsn || n1.Group != "g1" || n1.MaxTasks != 2 {
		t.Errorf("node list -o json = %+v, want n1 (group g1, max 2) and n2", nodes)
	}
	if n2 := byName["n2"]; n2.Group != "n2" || n2.MaxTasks != 4 {
		t.Errorf("n2 = %+v, want group n2 (its own name) and max_tasks 4 by default", n2)
	}
	r = e.run("node", "list")
	want(t, r, 0)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(r.stdout, "g1") || !strings.Contains(r.stdout, "0/2") {
		t.Errorf("node list table:\n%s", r.stdout)
	}

	// node add of a registered node updates it, keeping the group and max tasks it is not
	// given: a standby re-added to change its limit stays in its primary's group.
	r = e.run("node", "add", "n1", "--dsn", dsn, "--max-tasks", "3")
	want(t, r, 0)
	if !strings.Contains(r.stderr, "node n1 updated") {
		t.Errorf("node add of a registered node: %s", r)
	}
	want(t, e.run("node", "add", "n1", "--dsn", dsn+" application_name=x"), 0)
	for _, n := range decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")) {
		if n.Name == "n1" && (n.Group != "g1" || n.MaxTasks != 3 || n.DSN != dsn+" application_name=x") {
			t.Errorf("n1 after updates = %+v, want group g1, max_tasks 3 and the new conninfo", n)
		}
	}
	want(t, e.run("node", "add", "n1", "--dsn", dsn, "--group", "g1", "--max-tasks", "2"), 0)

	// Passwords never reach the catalog: workers take them from their environment.
	for _, conninfo := range []string{
		"host=localhost dbname=app user=app password=s3cr3t",
		"host=localhost dbname=app user=app password = 's3cr3t'",
		"postgres://app:s3cr3t@localhost:5432/app",
		"postgresql://app:s3cr3t@localhost/app?sslmode=disable",
		"postgres://app@localhost/app?password=s3cr3t",
	} {
		r := e.run("node", "add", "leaky", "--dsn", conninfo)
		wantUsage(t, r, "must not contain a password")
		if strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("the refusal repeats the password: %q", r.stderr)
		}
	}
	// A malformed conninfo is refused too, and a password in it is not echoed back.
	wantUsage(t, e.run("node", "add", "bad", "--dsn", "host=localhost port=notaport"), `node "bad": conninfo`)
	t.Run("malformed URL with password", func(t *testing.T) {
		r := e.run("node", "add", "bad", "--dsn", "postgres://app:s3cr3t@localhost:notaport/app")
		wantUsage(t, r, `node "bad": conninfo`)
		if strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("the refusal repeats the password: %q", r.stderr)
		}
	})
	if nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")); len(nodes) != 2 {
		t.Errorf("refused nodes were registered: %+v", nodes)
	}

	r = e.run("node", "remove", "n2")
	want(t, r, 0)
	if !strings.Contains(r.stderr, "node n2 removed") {
		t.Errorf("node remove: %s", r)
	}
	if nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")); len(nodes) != 1 || nodes[0].Name != "n1" {
		t.Errorf("after remove: %+v", nodes)
	}
	t.Run("invalid name", func(t *testing.T) {
		wantUsage(t, e.run("node", "add", "a b", "--dsn", dsn), `node "a b": name must be`)
	})
	wantUsage(t, e.run("node", "remove", "n2"), `node "n2"`, "not found")
	wantUsage(t, e.run("node", "remove", "nosuch"), `node "nosuch"`, "not found")
	r = e.run("node", "remove", "n1")
	want(t, r, 0)
	if nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")); nodes == nil || len(nodes) != 0 {
		t.Errorf("node list -o json with no nodes should print [], got %q", e.run("node", "list", "-o", "json").stdout)
	}
}

const specJSON = `{
  "description": "two steps",
  "tasks": [
    {"name": "a", "node": "n1", "sql": "SELECT 1", "max_attempts": 2, "timeout": "1m"},
    {"name": "b", "node": "n1", "sql": "SELECT 2", "depends_on": ["a"], "transaction": false}
  ]
}`

const specYAML = `
description: two steps
tasks:
  - name: a
    node: n1
    sql: SELECT 1
    max_attempts: 2
    timeout: 1m
  - name: b
    node: n1
    sql: |
      SELECT 2
    depends_on: [a]
    transaction: false
`

// job submit prints the job id alone, from a file or standard input, JSON or YAML.
func TestSubmit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	dir := t.TempDir()
	var ids []string
	for _, tc := range []struct{ name, text string }{{"spec.json", specJSON}, {"spec.yaml", specYAML}} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, jobID(t, e.run("job", "submit", path)))
		ids = append(ids, jobID(t, e.runIn(tc.text, "job", "submit", "-")))
	}
	for _, id := range ids {
		j := e.show(id)
		if len(j.Tasks) != 2 || *j.Tasks[0].Name != "a" || *j.Tasks[1].Name != "b" || *j.State != string(deckhandtype.JobScheduled) {
			t.Errorf("job %s: %+v", id, j)
		}
	}
	jobs := e.listJobs()
	if len(jobs) != 4 || jobs[0].Description != "two steps" || strconv.FormatInt(jobs[0].ID, 10) != ids[3] {
		t.Errorf("job list -o json = %+v, want the 4 jobs newest first", jobs)
	}
	if jobs := e.listJobs("--limit", "2", "--state", "scheduled"); len(jobs) != 2 || strconv.FormatInt(jobs[1].ID, 10) != ids[2] {
		t.Errorf("job list --limit 2 = %+v", jobs)
	}

	// No worker runs here, so waiting times out; even a deadline too short to read the job
	// once says what state the job is in, and an unknown job is still bad input.
	for _, timeout := range []string{"1ns", "100ms"} {
		wantOneLineError(t, e.run("job", "wait", ids[0], "--timeout", timeout), cli.ExitTimeout,
			"timed out after "+timeout+" waiting for job "+ids[0]+": still scheduled, 0/2 done")
	}
	wantUsage(t, e.run("job", "wait", "999999", "--timeout", "1ns"), "job 999999", "not found")
}

// Bad specs exit 2 with a one-line reason, and write nothing.
func TestSubmitRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	task := func(fields string) string { return `{"tasks": [` + fields + `]}` }
	for _, tc := range []struct {
		name, spec string
		fragments  []string
	}{
		{"malformed json", `{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"}`, []string{"spec: line"}},
		{"malformed json line", "{\n\"tasks\": [\n{\"name\": \"a\",, }]}", []string{"spec: line 3"}},
		{"malformed yaml", "tasks:\n  - name: a\n   node: n1\n", []string{"spec: "}},
		{"empty", "  \n", []string{"spec: empty input"}},
		{"no tasks", `{"description": "x", "tasks": []}`, []string{"job has no tasks"}},
		{"unknown field", task(`{"name": "a", "node": "n1", "sqll": "SELECT 1"}`), []string{`unknown field "sqll"`, `did you mean "sql"`}},
		{"cycle", task(`{"name": "a", "node": "n1", "sql": "SELECT 1", "depends_on": ["c"]},
			{"name": "b", "node": "n1", "sql": "SELECT 1", "depends_on": ["a"]},
			{"name": "c", "node": "n1", "sql": "SELECT 1", "depends_on": ["b"]}`),
			[]string{"dependency cycle: a -> c -> b -> a"}},
		{"self dependency", task(`{"name": "a", "node": "n1", "sql": "SELECT 1", "depends_on": ["a"]}`), []string{`task "a": depends on itself`}},
		{"unknown node", task(`{"name": "a", "node": "n1", "sql": "SELECT 1"}, {"name": "b", "node": "nope", "sql": "SELECT 1"}`),
			[]string{`task "b": unknown node "nope"`}},
		{"duplicate names", task(`{"name": "a", "node": "n1", "sql": "SELECT 1"}, {"name": "a", "node": "n1", "sql": "SELECT 2"}`),
			[]string{`duplicate task name "a"`}},
		{"unknown dependency", task(`{"name": "a", "node": "n1", "sql": "SELECT 1", "depends_on": ["zz"]}`),
			[]string{`task "a": depends on unknown task "zz"`}},
		{"empty sql", task(`{"name": "a", "node": "n1", "sql": "  "}`), []string{`task "a": sql is empty`}},
		{"no sql", task(`{"name": "a", "node": "n1"}`), []string{`task "a": sql is empty`}},
		{"no node", task(`{"name": "a", "sql": "SELECT 1"}`), []string{`task "a": node is required`}},
		{"bad timeout", task(`{"name": "a", "node": "n1", "sql": "SELECT 1", "timeout": "soon"}`), []string{`task "a": timeout`, "duration"}},
		{"unknown owner", task(`{"name": "a", "node": "n1", "sql": "SELECT 1", "owner": "ghost_role_x"}`),
			[]string{`owner role "ghost_role_x" does not exist on node n1`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUsage(t, e.runIn(tc.spec, "job", "submit", "-"), tc.fragments...)
			path := filepath.Join(t.TempDir(), "spec")
			if err := os.WriteFile(path, []byte(tc.spec), 0o600); err != nil {
				t.Fatal(err)
			}
			wantUsage(t, e.run("job", "submit", path), tc.fragments...)
		})
	}
	wantUsage(t, e.run("job", "run", "--node", "nope", "SELECT 1"), `unknown node "nope"`)
	wantUsage(t, e.run("job", "run", "--node", "n1", " "), "sql is empty")
	wantUsage(t, e.run("job", "run", "--node", "n1", "--owner", "ghost_role_x", "SELECT 1"), `owner role "ghost_role_x" does not exist`)
	if r := e.run("job", "list", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("refused jobs were written: job list -o json = %s", r)
	}
}

// Submitting for an owner requires membership in it; the catalog session user is the submitter.
func TestSubmitOwnerNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	submitter := e.Role("submitter")
	other := e.Role("other")
	qs := pgx.Identifier{submitter}.Sanitize()
	e.Exec("postgres", `GRANT deckhand_submitter TO `+qs)
	dsn := e.Cluster.DSN(e.DB, submitter)
	as := func(stdin string, args ...string) result {
		return deckhand(t, stdin, append([]string{"--catalog", dsn}, args...)...)
	}
	spec := func(owner string) string {
		return `{"tasks": [{"name": "a", "node": "n1", "owner": "` + owner + `", "sql": "SELECT 1"}]}`
	}

	wantUsage(t, as(spec(other), "job", "submit", "-"),
		`submitter "`+submitter+`" is not a member of role "`+other+`"`, "permission denied")
	wantUsage(t, as("", "job", "run", "--node", "n1", "--owner", other, "SELECT 1"), "is not a member of role")
	if r := as("", "job", "list", "-o", "json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("a refused job was written: %s", r)
	}

	// The same role can submit for itself, and for other once it is a member.
	id := jobID(t, as("", "job", "run", "--node", "n1", "SELECT 1"))
	e.Exec("postgres", `GRANT `+pgx.Identifier{other}.Sanitize()+` TO `+qs)
	id2 := jobID(t, as(spec(other), "job", "submit", "-"))
	jobs := decode[[]deckhandtype.Job](t, as("", "job", "list", "-o", "json"))
	if len(jobs) != 2 || strconv.FormatInt(jobs[1].ID, 10) != id || strconv.FormatInt(jobs[0].ID, 10) != id2 {
		t.Fatalf("jobs = %+v, want %s and %s", jobs, id, id2)
	}
	for _, j := range jobs {
		if j.SubmittedBy != submitter {
			t.Errorf("job %d submitted_by %q, want %q", j.ID, j.SubmittedBy, submitter)
		}
	}
	if j := e.show(id2); len(j.Tasks) != 1 {
		t.Errorf("job %s: %+v", id2, j)
	}
	var owner string
	if err := e.Client.Catalog().Pool.QueryRow(context.Background(),
		`SELECT owner FROM deckhand.tasks WHERE job_id = $1`, id2).Scan(&owner); err != nil || owner != other {
		t.Errorf("owner of job %s = %q, %v; want %q", id2, owner, err, other)
	}
}

func TestRunAndWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.worker()

	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	r := e.run("job", "wait", id, "--timeout", "20s")
	want(t, r, 0)
	if !strings.Contains(r.stderr, "job "+id+" finished") {
		t.Errorf("job wait should say the job finished: %s", r)
	}
	j := e.show(id)
	if *j.State != string(deckhandtype.JobFinished) || len(j.Tasks) != 1 || *j.Tasks[0].State != string(deckhandtype.TaskDone) ||
		*j.Tasks[0].Attempts != 1 || string(j.Tasks[0].LastError) != "null" {
		t.Errorf("job show: %+v", j)
	}
	// wait on a finished job returns at once; -o json prints the job.
	done := decode[deckhandtype.Job](t, e.run("job", "wait", id, "-o", "json"))
	if done.State != deckhandtype.JobFinished || done.TasksDone != 1 {
		t.Errorf("job wait -o json = %+v", done)
	}

	// Retrying a job that did not fail is refused, clearly: a request the job's state refuses
	// is bad input (exit 2), as for an unknown job; 1 is for an operation that failed.
	wantUsage(t, e.run("job", "retry", id), "job "+id+" is finished", "only failed or cancelled jobs can be retried")
	wantUsage(t, e.run("job", "cancel", id), "job "+id, "has ended")

	// Unknown jobs are bad input.
	for _, cmd := range []string{"show", "wait", "cancel", "retry"} {
		wantUsage(t, e.run("job", cmd, "999999"), "job 999999", "not found")
	}

	r = e.run("job", "show", id)
	want(t, r, 0)
	if !strings.HasPrefix(r.stdout, "job "+id+"  finished  1/1 done") || !strings.Contains(r.stdout, "TASK") {
		t.Errorf("job show table:\n%s", r.stdout)
	}
}

// VACUUM cannot run in a transaction block; --no-transaction runs it.
func TestNoTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE t (v int)`)
	e.worker()

	tx := jobID(t, e.run("job", "run", "--node", "n1", "VACUUM t"))
	noTx := jobID(t, e.run("job", "run", "--node", "n1", "--no-transaction", "VACUUM t"))
	want(t, e.run("job", "wait", noTx, "--timeout", "20s"), 0)
	want(t, e.run("job", "wait", tx, "--timeout", "20s"), 1)
	j := e.show(tx)
	var le lastError
	if err := json.Unmarshal(j.Tasks[0].LastError, &le); err != nil || !strings.Contains(le.Message, "cannot run inside a transaction block") {
		t.Errorf("VACUUM in a transaction: last_error %s, want cannot run inside a transaction block", j.Tasks[0].LastError)
	}
}

func TestFailedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.worker()

	id := jobID(t, e.run("job", "run", "--node", "n1", "SELEC 1"))
	r := e.run("job", "wait", id, "--timeout", "20s")
	want(t, r, 1)
	if !strings.Contains(r.stderr, "job "+id+" failed") {
		t.Errorf("job wait: %s", r)
	}
	// The line that says the job failed says why, in one line.
	if last := strings.TrimSpace(r.stderr[strings.LastIndex(strings.TrimSpace(r.stderr), "\n")+1:]); !strings.HasPrefix(last, "deckhand: job "+id+" failed: task sql: 42601: syntax error") {
		t.Errorf("job wait's error line %q does not say why the job failed", last)
	}
	j := e.show(id)
	if *j.State != string(deckhandtype.JobFailed) || *j.Tasks[0].State != string(deckhandtype.TaskFailed) {
		t.Fatalf("job show: %+v", j)
	}
	var le lastError
	if err := json.Unmarshal(j.Tasks[0].LastError, &le); err != nil {
		t.Fatalf("last_error %s: %v", j.Tasks[0].LastError, err)
	}
	if le.SQLState != "42601" || !strings.Contains(le.Message, `syntax error at or near "SELEC"`) {
		t.Errorf("last_error = %+v, want the server's syntax error", le)
	}
	// A syntax error is permanent: one attempt, not max_attempts.
	if *j.Tasks[0].Attempts != 1 || len(j.Attempts) != 1 || j.Attempts[0].Outcome == "" ||
		j.Attempts[0].SQLState != "42601" || !strings.Contains(j.Attempts[0].Message, "syntax error") {
		t.Errorf("attempts: task %d, list %+v", *j.Tasks[0].Attempts, j.Attempts)
	}
	r = e.run("job", "show", id)
	want(t, r, 0)
	if !strings.Contains(r.stdout, `syntax error at or near "SELEC"`) || !strings.Contains(r.stdout, "42601") {
		t.Errorf("job show table should show the error:\n%s", r.stdout)
	}

	// retry re-runs the failed task; it fails again, with a second attempt on record.
	r = e.run("job", "retry", id)
	want(t, r, 0)
	if !strings.HasPrefix(r.stdout, "job "+id+" ") {
		t.Errorf("job retry: %s", r)
	}
	want(t, e.run("job", "wait", id, "--timeout", "20s"), 1)
	if j := e.show(id); *j.State != string(deckhandtype.JobFailed) || len(j.Attempts) != 2 {
		t.Errorf("after retry: state %s, %d attempts; want failed with 2", *j.State, len(j.Attempts))
	}

	failed := e.listJobs("--state", "failed")
	ok := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	want(t, e.run("job", "wait", ok, "--timeout", "20s"), 0)
	all := e.listJobs()
	finished := e.listJobs("--state", "finished")
	if len(failed) != 1 || strconv.FormatInt(failed[0].ID, 10) != id || failed[0].TasksFailed != 1 {
		t.Errorf("job list --state failed = %+v", failed)
	}
	if len(finished) != 1 || strconv.FormatInt(finished[0].ID, 10) != ok {
		t.Errorf("job list --state finished = %+v", finished)
	}
	if len(all) != 2 || strconv.FormatInt(all[0].ID, 10) != ok {
		t.Errorf("job list = %+v, want both jobs newest first", all)
	}
	if running := e.listJobs("--state", "running"); len(running) != 0 {
		t.Errorf("job list --state running = %+v", running)
	}
	r = e.run("job", "list")
	want(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "STATE") ||
		!strings.HasPrefix(lines[1], ok+" ") || !strings.Contains(lines[1], "finished") ||
		!strings.HasPrefix(lines[2], id+" ") || !strings.Contains(lines[2], "failed") {
		t.Errorf("job list table:\n%s", r.stdout)
	}
	r = e.run("job", "list", "--state", "failed")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], id+" ") {
		t.Errorf("job list --state failed table:\n%s", r.stdout)
	}
}

// wait --timeout exits 3 on a job still running; cancel stops it on its node.
func TestTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.AddNode("n1", 4)
	e.worker()

	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT pg_sleep(30)"))
	start := time.Now()
	r := e.run("job", "wait", id, "--timeout", "200ms")
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("job wait --timeout 200ms took %s", elapsed)
	}
	wantOneLineError(t, r, cli.ExitTimeout, "timed out after 200ms waiting for job "+id+": still ")

	// Let the task start, so that cancel has a backend to stop.
	node := e.Pool(db)
	sleeping := func() bool {
		var n int
		err := node.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(30)%' AND state = 'active'`).Scan(&n)
		return err == nil && n > 0
	}
	testenv.Eventually(t, 10*time.Second, sleeping, "the task runs on its node")

	r = e.run("job", "cancel", id)
	want(t, r, 0)
	if r.stdout != "job "+id+" cancelling\n" && r.stdout != "job "+id+" cancelled\n" {
		t.Errorf("job cancel: %s", r)
	}
	start = time.Now()
	r = e.run("job", "wait", id, "--timeout", "10s")
	want(t, r, 1)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("cancelling a running task took %s", elapsed)
	}
	if !strings.Contains(r.stderr, "job "+id+" cancelled") {
		t.Errorf("job wait: %s", r)
	}
	if j := e.show(id); *j.State != string(deckhandtype.JobCancelled) || *j.Tasks[0].State != string(deckhandtype.TaskCancelled) {
		t.Errorf("job show: state %s, task %s; want cancelled", *j.State, *j.Tasks[0].State)
	}
	if sleeping() {
		t.Error("the cancelled task's backend still runs on the node")
	}
	if cancelled := e.listJobs("--state", "cancelled"); len(cancelled) != 1 {
		t.Errorf("job list --state cancelled = %+v", cancelled)
	}
}

// The real binary: process exit codes and DECKHAND_CATALOG.
func TestBinaryExitCodes(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	e := newEnv(t)
	e.AddNode("n1", 4)
	e.worker()

	exe := func(catalogDSN string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "DECKHAND_CATALOG="+catalogDSN)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
	}

	ok := jobID(t, exe(e.DSN, "job", "run", "--node", "n1", "SELECT 1"))
	want(t, exe(e.DSN, "job", "wait", ok, "--timeout", "20s"), 0)
	bad := jobID(t, exe(e.DSN, "job", "run", "--node", "n1", "SELEC 1"))
	want(t, exe(e.DSN, "job", "wait", bad, "--timeout", "20s"), 1)
	slow := jobID(t, exe(e.DSN, "job", "run", "--node", "n1", "SELECT pg_sleep(30)"))
	want(t, exe(e.DSN, "job", "wait", slow, "--timeout", "200ms"), 3)
	want(t, exe(e.DSN, "job", "cancel", slow), 0)
	wantUsage(t, exe(e.DSN, "job", "show", "abc"), "job id must be a positive integer")
	wantUsage(t, exe(e.DSN, "job", "show", "999999"), "not found")
	wantUsage(t, exe("", "job", "list"), "no catalog configured")
	wantUsage(t, exe(e.DSN, "job", "list", "--bogus"), "unknown flag")
	// --catalog wins over the environment.
	r := exe("host=/nonexistent", "--catalog", e.DSN, "job", "list", "-o", "json")
	if jobs := decode[[]deckhandtype.Job](t, r); len(jobs) != 3 {
		t.Errorf("job list -o json = %+v, want 3 jobs", jobs)
	}
}

// The first init on a cluster creates deckhand's roles: run by a login without CREATEROLE, it
// fails with one line that says what to do, rather than PostgreSQL's words alone.
func TestInitWithoutCreateRole(t *testing.T) {
	t.Parallel()
	cl := pgtest.New(t, pgcluster.Options{}) // a cluster of its own: roles are cluster-wide
	ctx := context.Background()
	for _, q := range []string{`CREATE ROLE catalog_owner LOGIN`, `CREATE DATABASE deckhand OWNER catalog_owner`} {
		if err := cl.Exec(ctx, "postgres", q); err != nil {
			t.Fatal(err)
		}
	}
	r := deckhand(t, "", "--catalog", cl.DSN("deckhand", "catalog_owner"), "init")
	wantOneLineError(t, r, cli.ExitFailed, "permission denied to create role", "CREATEROLE", "deckhand_worker")
}

// init by a login that does not own the catalog (a submitter running it against the catalog
// it uses) names the login to run it as; for a new catalog, by a login that may not create
// schemas, it says what it takes, beside PostgreSQL's refusal.
func TestInitByALoginThatDoesNotOwnTheCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	submitter := e.Role("submitter")
	e.Exec("postgres", `GRANT deckhand_submitter TO `+pgx.Identifier{submitter}.Sanitize())
	r := deckhand(t, "", "--catalog", e.Cluster.DSN(e.DB, submitter), "init")
	wantOneLineError(t, r, cli.ExitFailed, "owned by postgres", "run deckhand init as postgres")

	fresh := pgtest.NewDatabase(t)
	r = deckhand(t, "", "--catalog", e.Cluster.DSN(fresh, submitter), "init")
	wantOneLineError(t, r, cli.ExitFailed, "permission denied", "may create schemas", "CREATE SCHEMA deckhand AUTHORIZATION")
}
