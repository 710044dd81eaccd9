package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testKinds are the kinds these tests submit besides sql and noop.
var testKinds = Kinds{
	"testdrop": {NeedsNode: true, Validate: func(p json.RawMessage) error {
		if p == nil {
			return errors.New(`testdrop: payload is required: {"table": "t"}`)
		}
		dec := json.NewDecoder(strings.NewReader(string(p)))
		dec.DisallowUnknownFields()
		var v struct{ Table string }
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("testdrop: payload: %w", err)
		}
		return nil
	}},
	"testexport": {Validate: func(json.RawMessage) error { return nil }},
}

func ptr[T any](v T) *T { return &v }

const fullJSON = `{
  "description": "nightly maintenance",
  "kind": "sql",
  "search_path": "app, public",
  "settings": {"work_mem": "64MB", "myext.flag": "on"},
  "tasks": [
    {"name": "a", "node": "n1", "owner": "app", "sql": "select 1", "depends_on": [], "max_attempts": 3, "timeout": "10m", "transaction": true},
    {"name": "b", "node": "n1", "sql": "vacuum t", "depends_on": ["a"], "timeout": 30, "transaction": false},
    {"name": "c", "kind": "testdrop", "node": "n2", "payload": {"table": "t"}, "depends_on": ["a", "b"]}
  ]
}`

const fullYAML = `
# same job as fullJSON
description: nightly maintenance
kind: sql
search_path: app, public
settings:
  work_mem: 64MB
  myext.flag: "on"
tasks:
  - name: a
    node: n1
    owner: app
    sql: select 1
    depends_on: []
    max_attempts: 3
    timeout: 10m
    transaction: true
  - name: b
    node: n1
    sql: |-
      vacuum t
    depends_on: [a]
    timeout: 30
    transaction: false
  - name: c
    kind: testdrop
    node: n2
    payload:
      table: t
    depends_on:
      - a
      - b
`

func wantFull() *Job {
	return &Job{
		Description: "nightly maintenance",
		Kind:        "sql",
		SearchPath:  "app, public",
		Settings:    map[string]string{"work_mem": "64MB", "myext.flag": "on"},
		Tasks: []Task{
			{Name: "a", Node: "n1", Owner: "app", SQL: "select 1", DependsOn: []string{}, MaxAttempts: 3,
				Timeout: Duration(10 * time.Minute), Transaction: ptr(true)},
			{Name: "b", Node: "n1", SQL: "vacuum t", DependsOn: []string{"a"},
				Timeout: Duration(30 * time.Second), Transaction: ptr(false)},
			{Name: "c", Kind: "testdrop", Node: "n2", Payload: json.RawMessage(`{"table": "t"}`), DependsOn: []string{"a", "b"}},
		},
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"json", fullJSON},
		{"yaml", fullYAML},
		{"json with BOM and blank lines", "\xef\xbb\xbf\n\n" + fullJSON + "\n"},
		{"yaml with explicit document markers", "---\n" + fullYAML + "...\n"},
		{"yaml ending in an empty document", fullYAML + "---\n"},
		{"yaml flow style", `{description: nightly maintenance, kind: sql, search_path: "app, public",
			settings: {work_mem: 64MB, myext.flag: "on"},
			tasks: [{name: a, node: n1, owner: app, sql: select 1, depends_on: [], max_attempts: 3, timeout: 10m, transaction: true},
			        {name: b, node: n1, sql: vacuum t, depends_on: [a], timeout: 30, transaction: false},
			        {name: c, kind: testdrop, node: n2, payload: {table: t}, depends_on: [a, b]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := wantFull()
			// Payload bytes differ in spacing between JSON and YAML input; compare them as values.
			var gp, wp any
			if err := json.Unmarshal(got.Tasks[2].Payload, &gp); err != nil {
				t.Fatalf("payload: %v", err)
			}
			_ = json.Unmarshal(want.Tasks[2].Payload, &wp)
			if !reflect.DeepEqual(gp, wp) {
				t.Errorf("payload = %s, want %s", got.Tasks[2].Payload, want.Tasks[2].Payload)
			}
			payload := got.Tasks[2].Payload
			got.Tasks[2].Payload, want.Tasks[2].Payload = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
			}
			got.Tasks[2].Payload = payload
			if err := got.Validate(testKinds); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "spec: empty input"},
		{"blank", " \n\t\n", "spec: empty input"},
		{"yaml comment only", "# nothing\n", "spec: empty input"},
		{"null", "null", "spec: empty input"},
		{"array", "[]", `spec: expected a job object with a "tasks" list, got array`},
		{"scalar", "hello", `spec: expected a job object with a "tasks" list, got string`},
		{"json syntax", "{\n  \"tasks\": [\n    {\"name\": \"a\"\n  ]\n}",
			"spec: line 4: invalid character ']' after object key:value pair"},
		{"json truncated", "{\n\"tasks\": [", "spec: line 2: unexpected end of JSON input"},
		{"json then text", `{"tasks": [{"name": "a", "kind": "noop"}]} trailing`,
			"spec: line 1: invalid character 't' after top-level value"},
		{"two json objects", "{\"tasks\": [{\"name\": \"a\", \"kind\": \"noop\"}]}\n{\"tasks\": []}",
			"spec: line 2: invalid character '{' after top-level value"},
		{"json closed twice", `{"tasks": [{"name": "a", "kind": "noop"}]}}`,
			"spec: line 1: invalid character '}' after top-level value"},
		{"two yaml documents", "tasks:\n  - {name: a, kind: noop}\n---\ntasks:\n  - {name: b, kind: noop}\n",
			"spec: more than one YAML document: a spec is one job"},
		{"yaml flow then text", "{tasks: [{name: a, kind: noop}]} trailing",
			"spec: line 1: invalid character 't' looking for beginning of object key string"},
		{"yaml then text", "tasks:\n  - {name: a, kind: noop}\n... trailing\n",
			"spec: text after the end of the job: line 2: did not find expected <document start>"},
		{"yaml syntax", "tasks:\n  - name: a\n    sql: x\n   bad: 1\n", "spec: line 3: did not find expected '-' indicator"},
		{"yaml tab", "tasks:\n\t- name: a\n", "spec: line 2: found character that cannot start any token"},
		{"yaml duplicate key", "tasks:\n  - name: a\n    sql: x\n    sql: y\n", `spec: line 4: key "sql" already set in map`},
		{"unknown job field", `{"task": []}`, `spec: unknown field "task" in job (did you mean "tasks"?)`},
		{"unknown task field", `{"tasks": [{"name": "b", "dependson": ["a"]}]}`,
			`spec: unknown field "dependson" in task "b" (did you mean "depends_on"?)`},
		{"unknown task field yaml", "tasks:\n  - name: b\n    timout: 10m\n",
			`spec: unknown field "timout" in task "b" (did you mean "timeout"?)`},
		{"wrong case", `{"tasks": [{"Name": "b"}]}`, `spec: unknown field "Name" in task #1 (did you mean "name"?)`},
		{"unknown field no suggestion", `{"tasks": [{"name": "b", "zz": 1}]}`, `spec: unknown field "zz" in task "b"`},
		{"tasks not a list", `{"tasks": {}}`, "spec: tasks: expected a list, got object"},
		{"task not an object", `{"tasks": [{"name": "a", "sql": "x"}, 7]}`, "spec: task #2: expected an object, got number 7"},
		{"task null", `{"tasks": [null]}`, "spec: task #1: expected an object, got null"},
		{"settings not strings", `{"settings": {"work_mem": 64}, "tasks": []}`, "spec: settings: expected a string, got number"},
		{"max_attempts string", `{"tasks": [{"name": "a", "max_attempts": "3"}]}`,
			`spec: task "a": max_attempts: expected an integer, got string`},
		{"max_attempts fraction", `{"tasks": [{"name": "a", "max_attempts": 1.5}]}`,
			`spec: task "a": max_attempts: expected an integer, got number 1.5`},
		{"depends_on string", "tasks:\n  - name: a\n    depends_on: b\n", `spec: task "a": depends_on: expected a list, got string`},
		{"transaction string", `{"tasks": [{"name": "a", "transaction": "maybe"}]}`,
			`spec: task "a": transaction: expected true or false, got string`},
		{"timeout bad string", `{"tasks": [{"name": "a", "timeout": "soon"}]}`,
			`spec: task "a": timeout: expected a duration such as "90s", "10m", "1h30m" or a number of seconds, got string "soon"`},
		{"timeout bool", `{"tasks": [{"name": "a", "timeout": true}]}`,
			`spec: task "a": timeout: expected a duration such as "90s", "10m", "1h30m" or a number of seconds, got bool`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", job)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q\nwant      %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Errorf("error %T is not a *spec.Error", err)
			}
		})
	}
}

// sqlTask is a valid SQL task with the given name and dependencies.
func sqlTask(name string, deps ...string) Task {
	return Task{Name: name, Node: "n1", SQL: "select 1", DependsOn: deps}
}

func TestValidateErrors(t *testing.T) {
	long := strings.Repeat("x", 64)
	for _, tc := range []struct {
		name string
		job  *Job
		want string
	}{
		{"nil job", nil, "no job"},
		{"no tasks", &Job{}, "job has no tasks"},
		{"search_path NUL", &Job{SearchPath: "a\x00b", Tasks: []Task{sqlTask("a")}}, "search_path contains a NUL byte"},
		{"bad setting name", &Job{Settings: map[string]string{"work mem": "1"}, Tasks: []Task{sqlTask("a")}},
			`settings: "work mem" is not a valid setting name`},
		{"setting name empty segment", &Job{Settings: map[string]string{"ext..x": "1"}, Tasks: []Task{sqlTask("a")}},
			`settings: "ext..x" is not a valid setting name`},
		{"setting name injection", &Job{Settings: map[string]string{"work_mem=1; drop": "1"}, Tasks: []Task{sqlTask("a")}},
			`settings: "work_mem=1; drop" is not a valid setting name`},
		{"setting value NUL", &Job{Settings: map[string]string{"work_mem": "1\x00"}, Tasks: []Task{sqlTask("a")}},
			`settings: value of "work_mem" contains a NUL byte`},
		{"empty name", &Job{Tasks: []Task{sqlTask("a"), sqlTask("")}}, "task #2: name is empty"},
		{"name with space", &Job{Tasks: []Task{sqlTask(" a")}}, `task " a": name has leading or trailing space`},
		{"name too long", &Job{Tasks: []Task{sqlTask(long)}}, `task "` + long + `": name is longer than 63 bytes`},
		{"name control char", &Job{Tasks: []Task{sqlTask("a\nb")}}, `task "a\nb": name contains a control character`},
		{"duplicate name", &Job{Tasks: []Task{sqlTask("a"), sqlTask("b"), sqlTask("a")}}, `duplicate task name "a" (tasks #1 and #3)`},
		{"no kind no sql", &Job{Tasks: []Task{{Name: "x", Node: "n1"}}}, `task "x": sql is empty`},
		{"sql whitespace", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: " \n\t"}}}, `task "x": sql is empty`},
		{"kind sql no sql", &Job{Tasks: []Task{{Name: "x", Kind: KindSQL, Node: "n1"}}}, `task "x": sql is empty`},
		{"sql without node", &Job{Tasks: []Task{{Name: "x", SQL: "select 1"}}}, `task "x": node is required for kind "sql"`},
		{"sql with payload", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "select 1", Payload: json.RawMessage(`{}`)}}},
			`task "x": kind "sql" does not take a payload`},
		{"noop with sql", &Job{Tasks: []Task{{Name: "x", Kind: KindNoop, SQL: "select 1"}}}, `task "x": kind "noop" does not take sql`},
		{"registered kind with sql", &Job{Tasks: []Task{{Name: "x", Kind: "testdrop", Node: "n1", SQL: "drop table t"}}},
			`task "x": kind "testdrop" does not take sql`},
		{"registered kind needs node", &Job{Tasks: []Task{{Name: "x", Kind: "testdrop"}}}, `task "x": node is required for kind "testdrop"`},
		{"unknown kind", &Job{Tasks: []Task{{Name: "x", Kind: "SQL", SQL: "select 1"}}},
			`task "x": unknown kind "SQL" (known kinds: noop, sql, testdrop, testexport)`},
		{"max_attempts negative", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "s", MaxAttempts: -1}}},
			`task "x": max_attempts must be between 1 and 1000 (0 means the default, 3), got -1`},
		{"max_attempts too big", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "s", MaxAttempts: 1001}}},
			`task "x": max_attempts must be between 1 and 1000 (0 means the default, 3), got 1001`},
		{"timeout negative", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "s", Timeout: Duration(-5 * time.Second)}}},
			`task "x": timeout must be positive, got -5s`},
		{"timeout under a millisecond", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "s", Timeout: Duration(time.Microsecond)}}},
			`task "x": timeout must be at least 1ms, got 1µs`},
		{"timeout beyond statement_timeout", &Job{Tasks: []Task{{Name: "x", Node: "n1", SQL: "s", Timeout: Duration(MaxTimeout + time.Millisecond)}}},
			`task "x": timeout must be at most 596h31m23.647s (PostgreSQL's longest, 2147483647ms), got 596h31m23.648s`},
		{"noop with payload", &Job{Tasks: []Task{{Name: "x", Kind: KindNoop, Payload: json.RawMessage(`{"a": 1}`)}}},
			`task "x": kind "noop" does not take a payload`},
		{"registered kind without payload", &Job{Tasks: []Task{{Name: "x", Kind: "testdrop", Node: "n1"}}},
			`task "x": testdrop: payload is required: {"table": "t"}`},
		{"registered kind with null payload", &Job{Tasks: []Task{{Name: "x", Kind: "testdrop", Node: "n1", Payload: json.RawMessage(` null `)}}},
			`task "x": testdrop: payload is required: {"table": "t"}`},
		{"registered kind, payload refused", &Job{Tasks: []Task{{Name: "x", Kind: "testdrop", Node: "n1", Payload: json.RawMessage(`{"table": "t", "cascade": true}`)}}},
			`task "x": testdrop: payload: json: unknown field "cascade"`},
		{"reserved setting", &Job{Settings: map[string]string{"Search_Path": "public"}, Tasks: []Task{sqlTask("a")}},
			`settings: "Search_Path" is set by deckhand for every task (a job names its search_path, timeout and owner in their own fields)`},
		{"role setting", &Job{Settings: map[string]string{"role": "postgres"}, Tasks: []Task{sqlTask("a")}},
			`settings: "role" is set by deckhand for every task (a job names its search_path, timeout and owner in their own fields)`},
		{"unknown dependency", &Job{Tasks: []Task{sqlTask("a"), sqlTask("b", "a", "z")}}, `task "b": depends on unknown task "z"`},
		{"self dependency", &Job{Tasks: []Task{sqlTask("a", "a")}}, `task "a": depends on itself`},
		{"duplicate dependency", &Job{Tasks: []Task{sqlTask("a"), sqlTask("b", "a", "a")}}, `task "b": depends_on lists "a" twice`},
		{"2-cycle", &Job{Tasks: []Task{sqlTask("a", "b"), sqlTask("b", "a")}}, "dependency cycle: a -> b -> a"},
		{"3-cycle", &Job{Tasks: []Task{sqlTask("a", "b"), sqlTask("b", "c"), sqlTask("c", "a")}}, "dependency cycle: a -> b -> c -> a"},
		{"cycle off the first task", &Job{Tasks: []Task{
			sqlTask("start", "x"), sqlTask("x", "y"), sqlTask("y", "z"), sqlTask("z", "x"), sqlTask("other")}},
			"dependency cycle: x -> y -> z -> x"},
		{"first problem wins", &Job{Tasks: []Task{sqlTask("a", "nope"), {Name: "b", Kind: "bogus"}}},
			`task "a": depends on unknown task "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.job.Validate(testKinds)
			if err == nil {
				t.Fatal("Validate succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q\nwant      %q", err, tc.want)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Errorf("error %T is not a *spec.Error", err)
			}
			if tc.job != nil {
				for _, task := range tc.job.Tasks {
					if task.Kind == KindSQL && task.SQL != "" && task.Name != "x" {
						t.Errorf("task %q: Kind normalized although Validate failed", task.Name)
					}
				}
			}
		})
	}
}

func TestValidateOK(t *testing.T) {
	job := &Job{
		Settings: map[string]string{"work_mem": "64MB", "myext.sub_setting": "x", "_x1": ""},
		Tasks: []Task{
			{Name: "a", Node: "n1", SQL: "select 1"},
			{Name: strings.Repeat("é", 31), Kind: KindNoop, DependsOn: []string{"a"}, MaxAttempts: 1000},
			{Name: "c", Kind: "testexport", Payload: json.RawMessage(`{"part": 1}`), Timeout: Duration(time.Minute)},
			{Name: "d", Kind: KindNoop, Payload: json.RawMessage(`null`)},
		},
	}
	if err := job.Validate(testKinds); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for i, want := range []string{KindSQL, KindNoop, "testexport", KindNoop} {
		if got := job.Tasks[i].Kind; got != want {
			t.Errorf("task %d: Kind = %q, want %q", i, got, want)
		}
	}
}

func TestTopoOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks []Task
		want  []int
	}{
		{"independent tasks keep spec order", []Task{sqlTask("c"), sqlTask("a"), sqlTask("b")}, []int{0, 1, 2}},
		{"chain listed backwards", []Task{sqlTask("c", "b"), sqlTask("b", "a"), sqlTask("a")}, []int{2, 1, 0}},
		{"diamond", []Task{sqlTask("a"), sqlTask("b", "a"), sqlTask("c", "a"), sqlTask("d", "b", "c")}, []int{0, 1, 2, 3}},
		{"diamond listed backwards", []Task{sqlTask("d", "b", "c"), sqlTask("c", "a"), sqlTask("b", "a"), sqlTask("a")}, []int{3, 1, 2, 0}},
		{"ready task first even if later in spec", []Task{sqlTask("b", "a"), sqlTask("x"), sqlTask("a")}, []int{1, 2, 0}},
		{"cycle is left out", []Task{sqlTask("a"), sqlTask("b", "c"), sqlTask("c", "b"), sqlTask("d", "b")}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &Job{Tasks: tc.tasks}
			if got := job.TopoOrder(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TopoOrder = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"10m"`, 10 * time.Minute, false},
		{`"1h30m"`, 90 * time.Minute, false},
		{`30`, 30 * time.Second, false},
		{`1.5`, 1500 * time.Millisecond, false},
		{`0`, 0, false},
		{`null`, 0, false},
		{`"soon"`, 0, true},
		{`""`, 0, true},
		{`true`, 0, true},
		{`[1]`, 0, true},
		{`1e300`, 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var d Duration
			err := json.Unmarshal([]byte(tc.in), &d)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", time.Duration(d))
				}
				_ = err.Error() // must not panic
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if time.Duration(d) != tc.want {
				t.Errorf("got %v, want %v", time.Duration(d), tc.want)
			}
		})
	}
	out, err := json.Marshal(Duration(90 * time.Second))
	if err != nil || string(out) != `"1m30s"` {
		t.Errorf("Marshal = %s, %v; want \"1m30s\"", out, err)
	}
}

func TestDefaults(t *testing.T) {
	var task Task
	if got := task.Attempts(); got != DefaultMaxAttempts {
		t.Errorf("Attempts() = %d, want %d", got, DefaultMaxAttempts)
	}
	if got := task.TimeoutOrDefault(); got != DefaultTimeout {
		t.Errorf("TimeoutOrDefault() = %v, want %v", got, DefaultTimeout)
	}
	if !task.InTransaction() {
		t.Error("InTransaction() = false by default")
	}
	task = Task{MaxAttempts: 7, Timeout: Duration(time.Second)}
	if task.Attempts() != 7 || task.TimeoutOrDefault() != time.Second {
		t.Errorf("Attempts() = %d, TimeoutOrDefault() = %v; want 7, 1s", task.Attempts(), task.TimeoutOrDefault())
	}
}

func TestKinds(t *testing.T) {
	if k, ok := testKinds.lookup("testdrop"); !ok || !k.NeedsNode {
		t.Errorf(`lookup("testdrop") = %v, %v; want a kind that needs a node`, k, ok)
	}
	if k, ok := testKinds.lookup(KindNoop); !ok || k.NeedsNode {
		t.Errorf("lookup(noop) = %v, %v; want a kind that needs no node", k, ok)
	}
	if _, ok := (Kinds{}).lookup(KindSQL); !ok {
		t.Error("sql is known without being listed")
	}
	if _, ok := testKinds.lookup("nope"); ok {
		t.Error(`lookup("nope") found a kind`)
	}
	err := (&Job{Tasks: []Task{{Name: "a", Kind: "nope"}}}).Validate(testKinds)
	if err == nil || !strings.Contains(err.Error(), "known kinds: noop, sql, testdrop, testexport") {
		t.Errorf("unknown kind: %v, want the known kinds listed", err)
	}
}

// An unknown field of megabytes is named in a line of its own length at most 64 bytes (and is
// not compared letter by letter with every known field).
func TestParseClipsAHugeUnknownField(t *testing.T) {
	name := strings.Repeat("x", 8<<20)
	_, err := Parse([]byte(`{"tasks": [{"name": "a", "kind": "noop", "` + name + `": 1}]}`))
	if err == nil || !strings.Contains(err.Error(), "unknown field") || len(err.Error()) > 200 {
		msg := fmt.Sprint(err)
		t.Fatalf("error of %d bytes (%.120s); want one naming the field in at most 200", len(msg), msg)
	}
}
