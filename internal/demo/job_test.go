package demo

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/spec"
)

// TestJobYAML reads the embedded job.yaml, filled in for the default options, the way
// `deckhand job submit` reads a file: the demo's job must be a valid spec with the DAG the
// demo's picture and verification promise.
func TestJobYAML(t *testing.T) {
	doc, err := renderJob(Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	job, err := spec.Parse(doc)
	if err != nil {
		t.Fatalf("spec.Parse: %v\n%s", err, doc)
	}
	if err := job.Validate(nil); err != nil {
		t.Fatalf("Validate: %v\n%s", err, doc)
	}
	if job.SearchPath != Schema {
		t.Errorf("search_path %q, want %q", job.SearchPath, Schema)
	}
	if want := "deckhand demo: shop tables on eu, us, then a report"; job.Description != want {
		t.Errorf("description %q, want %q", job.Description, want)
	}

	wantDeps := map[string][]string{
		"eu/tables": nil, "eu/customers": {"eu/tables"}, "eu/orders": {"eu/tables"},
		"eu/index": {"eu/orders"}, "eu/analyze": {"eu/index", "eu/customers"},
		"us/tables": nil, "us/customers": {"us/tables"}, "us/orders": {"us/tables"},
		"us/index": {"us/orders"}, "us/analyze": {"us/index", "us/customers"},
		"report": {"eu/analyze", "us/analyze"},
	}
	if len(job.Tasks) != 11 {
		t.Fatalf("%d tasks, want 11: %v", len(job.Tasks), taskNames(job))
	}
	if got, want := taskNames(job), slices.Sorted(maps.Keys(wantDeps)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	for _, task := range job.Tasks {
		node, _, _ := strings.Cut(task.Name, "/")
		if task.Name == "report" {
			node = "eu"
		}
		if !slices.Equal(task.DependsOn, wantDeps[task.Name]) {
			t.Errorf("%s depends on %v, want %v", task.Name, task.DependsOn, wantDeps[task.Name])
		}
		if task.Node != node || task.Owner != DefaultOwner || task.Kind != spec.KindSQL {
			t.Errorf("%s: %s task on %q as %q, want an sql task on %q as %q", task.Name, task.Kind, task.Node, task.Owner, node, DefaultOwner)
		}
		if task.MaxAttempts != 3 || time.Duration(task.Timeout) != 2*time.Minute {
			t.Errorf("%s: %d attempts, timeout %s; want 3 and 2m", task.Name, task.MaxAttempts, time.Duration(task.Timeout))
		}
		if concurrently := strings.HasSuffix(task.Name, "/index"); task.InTransaction() == concurrently {
			t.Errorf("%s: in a transaction %v; only CREATE INDEX CONCURRENTLY runs outside one", task.Name, task.InTransaction())
		}
	}

	// The values filled in land in the SQL.
	sql := map[string]string{}
	for _, task := range job.Tasks {
		sql[task.Name] = task.SQL
	}
	for name, want := range map[string]string{
		"eu/tables":    "CREATE SCHEMA IF NOT EXISTS " + Schema + ";",
		"us/customers": "'us' FROM generate_series(1, 20000) g",
		"us/orders":    "% 20000,",
		"eu/orders":    "FROM generate_series(1, 200000) g",
	} {
		if !strings.Contains(sql[name], want) {
			t.Errorf("%s: SQL does not contain %q:\n%s", name, want, sql[name])
		}
	}
}

func taskNames(job *spec.Job) []string {
	var names []string
	for _, task := range job.Tasks {
		names = append(names, task.Name)
	}
	return names
}

// TestJobShape: the per-node tasks are repeated for every node, and the report waits for all.
func TestJobShape(t *testing.T) {
	job, err := buildJob(Options{Nodes: []string{"a", "b", "c"}}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Validate(nil); err != nil {
		t.Fatal(err)
	}
	if len(job.Tasks) != 16 {
		t.Errorf("%d tasks, want 16 (5 per node and the report)", len(job.Tasks))
	}
	byName := map[string][]string{}
	for _, task := range job.Tasks {
		byName[task.Name] = task.DependsOn
	}
	if got, want := byName["report"], []string{"a/analyze", "b/analyze", "c/analyze"}; !slices.Equal(got, want) {
		t.Errorf("report depends on %v, want every node's analyze %v (fan-in)", got, want)
	}
	if got := byName["b/analyze"]; !slices.Contains(got, "b/index") || !slices.Contains(got, "b/customers") {
		t.Errorf("b/analyze depends on %v, want b/index and b/customers", got)
	}
}

// TestJobValuesAreQuoted: option values arrive in the spec as they are, whatever YAML or SQL
// would make of them unquoted.
func TestJobValuesAreQuoted(t *testing.T) {
	nodes := []string{"yes", "null", "1e3", "-x", "a.b"}
	owner := "o'wn: er\n\"#[x]\\"
	job, err := buildJob(Options{Nodes: nodes, Owner: owner, Rows: 30}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Validate(nil); err != nil {
		t.Fatal(err)
	}
	for _, task := range job.Tasks {
		if task.Owner != owner {
			t.Errorf("%s: owner %q, want %q", task.Name, task.Owner, owner)
		}
		if node, _, _ := strings.Cut(task.Name, "/"); task.Name != "report" && task.Node != node {
			t.Errorf("%s: node %q, want %q", task.Name, task.Node, node)
		}
	}
	if got := job.Tasks[1]; got.Name != "yes/customers" || !strings.Contains(got.SQL, "'yes' FROM generate_series(1, 3) g") {
		t.Errorf("task %s, SQL %q: want yes/customers loading 3 customers of region 'yes'", got.Name, got.SQL)
	}
	if got := job.Tasks[len(job.Tasks)-1]; got.Node != "yes" {
		t.Errorf("the report runs on %q, want the first node", got.Node)
	}
}
