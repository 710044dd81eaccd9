package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/cli"
)

// rebalanceEnv is a catalog with three node groups (one node each, on databases of the shared
// cluster) holding tenant schemas of different sizes: n1 most, n3 nothing.
type rebalanceEnv struct {
	*env
	dbs   map[string]string // group → its node's database
	sizes map[string]int64  // schema → bytes, as PostgreSQL counts them
}

func newRebalanceEnv(t *testing.T) *rebalanceEnv {
	t.Helper()
	e := &rebalanceEnv{env: newEnv(t), dbs: map[string]string{}, sizes: map[string]int64{}}
	for _, g := range []string{"n1", "n2", "n3"} {
		e.dbs[g] = e.AddNode(g, 2)
	}
	// Rows of ~1 kB: 600 rows are about 700 kB with the table's pages and index.
	tenants := map[string][]struct {
		name string
		rows int
	}{
		"n1": {{"tenant_a", 1800}, {"tenant_b", 1200}, {"tenant_c", 900}, {"tenant_d", 600}, {"tenant_e", 300}},
		"n2": {{"tenant_f", 700}, {"tenant_g", 400}, {"Tenant H", 150}},
		"n3": {},
	}
	for g, ts := range tenants {
		for _, tn := range ts {
			q := pgx.Identifier{tn.name}.Sanitize()
			e.Exec(e.dbs[g], fmt.Sprintf(`CREATE SCHEMA %[1]s; CREATE TABLE %[1]s.orders (id int PRIMARY KEY, note text);
				INSERT INTO %[1]s.orders SELECT g, repeat(md5(g::text), 30) FROM generate_series(1, %[2]d) g;
				CREATE TABLE %[1]s.items (id int); INSERT INTO %[1]s.items SELECT generate_series(1, %[2]d)`, q, tn.rows))
			var bytes int64
			err := e.Pool(e.dbs[g]).QueryRow(context.Background(), `SELECT sum(pg_total_relation_size(c.oid))::bigint
				FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, tn.name).Scan(&bytes)
			if err != nil {
				t.Fatal(err)
			}
			e.sizes[tn.name] = bytes
		}
	}
	// Not a candidate by default: public.
	e.Exec(e.dbs["n1"], `CREATE TABLE public.shared AS SELECT generate_series(1, 50000) AS id`)
	return e
}

type planJSON struct {
	Threshold float64          `json:"threshold"`
	Mean      float64          `json:"mean_bytes"`
	Before    map[string]int64 `json:"before"`
	After     map[string]int64 `json:"after"`
	Balanced  bool             `json:"balanced"`
	Moves     []struct {
		Schema, From, To string
		Bytes            int64
	} `json:"moves"`
	Steps []struct {
		Schema    string `json:"schema"`
		From      string `json:"from"`
		To        string `json:"to"`
		DependsOn []int  `json:"depends_on"`
	} `json:"steps"`
	JobID *int64 `json:"job_id"`
}

// rebalance --dry-run -o json sizes the schemas on the real nodes, as PostgreSQL counts them,
// plans moves that bring the three groups within the threshold, and submits nothing.
func TestRebalanceDryRun(t *testing.T) {
	e := newRebalanceEnv(t)
	r := e.run("rebalance", "--groups", "n1,n2,n3", "--threshold", "15%", "--dry-run", "-o", "json")
	want(t, r, 0)
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	wantBefore := map[string]int64{}
	for s, b := range e.sizes {
		g := "n1"
		switch s {
		case "tenant_f", "tenant_g", "Tenant H":
			g = "n2"
		}
		wantBefore[g] += b
	}
	wantBefore["n3"] += 0
	for g, b := range wantBefore {
		if p.Before[g] != b {
			t.Errorf("group %s sized %d bytes, PostgreSQL counts %d", g, p.Before[g], b)
		}
	}
	if !p.Balanced || len(p.Moves) == 0 || len(p.Steps) != len(p.Moves) || p.Threshold != 0.15 || p.JobID != nil {
		t.Fatalf("plan: %s", r.stdout)
	}
	low, high := p.Mean*0.85, p.Mean*1.15
	for g, b := range p.After {
		if float64(b) < low || float64(b) > high {
			t.Errorf("group %s ends with %d bytes, outside [%.0f, %.0f]", g, b, low, high)
		}
	}
	for _, m := range p.Moves {
		if m.Bytes != e.sizes[m.Schema] {
			t.Errorf("move %+v: schema has %d bytes", m, e.sizes[m.Schema])
		}
	}
	if jobs := e.run("job", "list", "-o", "json"); strings.TrimSpace(jobs.stdout) != "[]" {
		t.Errorf("a dry run submitted: %s", jobs.stdout)
	}
	// Without -o json the plan goes to standard error only.
	r = e.run("rebalance", "--groups", "n1,n2,n3", "--threshold", "15%", "--dry-run")
	want(t, r, 0)
	if r.stdout != "" || !strings.Contains(r.stderr, "tenant_a") || !strings.Contains(r.stderr, "BEFORE") {
		t.Errorf("dry run as text: %s", r)
	}
}

// A schema that another job is to move, though its move has not begun (no worker runs), is
// left out of the plan and said so: a job with a move of it would be refused whole.
func TestRebalanceLeavesOutASchemaAnotherJobIsToMove(t *testing.T) {
	e := newRebalanceEnv(t)
	holder := jobID(t, e.run("move", "--schema", "tenant_a", "--from", "n1", "--to", "n3"))
	r := e.run("rebalance", "--groups", "n1,n2,n3", "--threshold", "15%", "-o", "json")
	want(t, r, 0)
	var p struct {
		planJSON
		Skipped []string `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if p.JobID == nil || len(p.Moves) == 0 {
		t.Fatalf("no rebalance job: %s", r)
	}
	for _, m := range p.Moves {
		if m.Schema == "tenant_a" {
			t.Errorf("the plan moves tenant_a, which job %s is to move: %+v", holder, p.Moves)
		}
	}
	if want := `schema "tenant_a": being moved by job ` + holder; !slices.Contains(p.Skipped, want) {
		t.Errorf("skipped %q, want %q among them", p.Skipped, want)
	}
}

// Bad input is refused in one line with exit 2; a submitter sizes only what the owner may read,
// and may not size as a role it is not a member of.
func TestRebalanceRefusesAndKeepsToTheOwner(t *testing.T) {
	e := newRebalanceEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--groups", "n1"}, "at least two"},
		{[]string{"--groups", "n1,n2", "--threshold", "0%"}, "--threshold"},
		{[]string{"--groups", "n1,n2", "--threshold", "ten"}, "--threshold"},
		{[]string{"--groups", "n1,nowhere"}, `no node is in group "nowhere"`},
		{[]string{"--groups", "n1,n2", "--schemas", "[a-"}, "--schemas"},
	} {
		wantUsage(t, e.run(append([]string{"rebalance", "--dry-run"}, tc.args...)...), tc.want)
	}
	wantUsage(t, e.run("rebalance", "statsu"), `unknown command or argument "statsu"`)
	wantUsage(t, e.run("rebalance", "status", "7"), `unknown command or argument "7"`)

	role, _ := e.Submitter("rebalancer")
	e.Exec(e.dbs["n1"], "GRANT USAGE ON SCHEMA tenant_a, tenant_b TO "+pgx.Identifier{role}.Sanitize())
	r := deckhand(t, "", "--catalog", e.RoleDSN(role), "rebalance", "--groups", "n1,n2,n3", "--dry-run", "-o", "json")
	want(t, r, 0)
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	// The role may use tenant_a and tenant_b only (on n1, which holds them).
	if got, wantN1 := p.Before["n1"], e.sizes["tenant_a"]+e.sizes["tenant_b"]; got != wantN1 || p.Before["n2"] != 0 {
		t.Errorf("as %s: sized %v, want n1 %d and nothing else", role, p.Before, wantN1)
	}
	r = deckhand(t, "", "--catalog", e.RoleDSN(role), "rebalance", "--groups", "n1,n2,n3", "--owner", "postgres", "--dry-run")
	wantOneLineError(t, r, cli.ExitUsage, "not a member of role")
}

// A rebalance submits one job of moves, in the plan's graph, with its key: a second one is
// refused with exit 4 and the first one's id; rebalance status shows the moves and bytes.
func TestRebalanceSubmitsOneJobAtATime(t *testing.T) {
	e := newRebalanceEnv(t)
	r := e.run("rebalance", "--groups", "n1,n2,n3", "-o", "json")
	want(t, r, 0)
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.JobID == nil {
		t.Fatalf("%v\n%s", err, r)
	}
	id := *p.JobID
	d, err := e.Client.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Key == nil || *d.Key != cli.RebalanceKey || d.Kind != "rebalance" || len(d.Tasks) != len(p.Steps) {
		t.Fatalf("job %d: %+v", id, d.Job)
	}
	for i, task := range d.Tasks {
		wantDeps := []string{}
		for _, dep := range p.Steps[i].DependsOn {
			wantDeps = append(wantDeps, fmt.Sprintf("move-%d", dep+1))
		}
		if task.Name != fmt.Sprintf("move-%d", i+1) || task.Kind != "move" || strings.Join(task.DependsOn, ",") != strings.Join(wantDeps, ",") {
			t.Errorf("task %d: %s %s after %v, want after %v", i, task.Name, task.Kind, task.DependsOn, wantDeps)
		}
	}

	second := e.run("rebalance", "--groups", "n1,n2,n3")
	if second.code != cli.ExitDuplicate || strings.TrimSpace(second.stdout) != fmt.Sprint(id) {
		t.Errorf("second rebalance: %s", second)
	}

	r = e.run("rebalance", "status", "-o", "json")
	want(t, r, 0)
	var s deckhandtype.RebalanceStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	var planned int64
	for _, m := range p.Moves {
		planned += m.Bytes
	}
	if s.JobID != id || len(s.Moves) != len(p.Moves) || s.Left.Moves != len(p.Moves) || s.Left.Bytes != planned ||
		s.Moves[0].Schema != p.Moves[0].Schema || s.Moves[0].Bytes != p.Moves[0].Bytes {
		t.Errorf("status: %s\nplan: %+v", r.stdout, p.Moves)
	}
	r = e.run("rebalance", "status")
	want(t, r, 0)
	if !strings.Contains(r.stdout, fmt.Sprintf("rebalance job %d", id)) || !strings.Contains(r.stdout, p.Moves[0].Schema) {
		t.Errorf("status as text: %s", r)
	}

	// Cancelled, it frees the key: the next rebalance is planned and submitted.
	want(t, e.run("job", "cancel", fmt.Sprint(id)), 0)
	third := e.run("rebalance", "--groups", "n1,n2,n3")
	want(t, third, 0)
	if strings.TrimSpace(third.stdout) == fmt.Sprint(id) {
		t.Errorf("third rebalance: %s", third)
	}
}

// A plan with nothing to move still has every key the docs name, with empty lists rather than
// null or nothing: scripts read moves, steps and skipped without checking for them first.
func TestRebalanceEmptyPlanJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 2)
	e.AddNode("n2", 2)
	r := e.run("rebalance", "--groups", "n1,n2", "--dry-run", "-o", "json")
	want(t, r, 0)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	for _, key := range []string{"threshold", "mean_bytes", "before", "after", "balanced", "moves", "steps", "skipped", "job_id"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("rebalance -o json has no %q: %s", key, r.stdout)
		}
	}
	for _, key := range []string{"moves", "steps", "skipped"} {
		if got := string(raw[key]); got != "[]" {
			t.Errorf("rebalance -o json: %s is %s, want []", key, got)
		}
	}
}

// A plan that finds nothing to balance says why on its listing, rather than show groups of
// 0 B and stop: no schema the owner may use matched.
func TestRebalanceSaysWhenNoSchemaIsACandidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 2)
	e.AddNode("n2", 2)
	r := e.run("rebalance", "--groups", "n1,n2", "--schemas", "tenant_*", "--dry-run")
	want(t, r, 0)
	if !strings.Contains(r.stderr, `no candidate schema`) || !strings.Contains(r.stderr, `--schemas "tenant_*"`) {
		t.Errorf("rebalance with no candidate schema says nothing of it:\n%s", r.stderr)
	}
}

// rebalance status without any rebalance is an unknown object, as `job show` of an unknown id:
// exit 2, with one line saying so.
func TestRebalanceStatusWithoutRebalance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("rebalance", "status", "-o", "json")
	want(t, r, 2)
	if !strings.Contains(r.stderr, "no rebalance to show") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("stderr %q; want one line saying there is no rebalance", r.stderr)
	}
}
