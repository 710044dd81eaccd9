package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// A rebalance end to end: five small tenant schemas, four on g1 and one on g2, over three
// groups of one primary each (max_tasks 1 on g1, 2 on the others). The job's online moves (package move) run on a
// worker; afterwards every schema lives where the plan put it with the rows it had, the
// placements say so, rebalance status counts every move done, and a new dry run finds the
// groups balanced.
func TestRebalanceEndToEnd(t *testing.T) {
	e := testenv.NewProxied(t, testenv.LogicalCluster(t), move.Feature())
	ctx := context.Background()
	dbs := map[string]string{}
	for _, g := range []string{"g1", "g2", "g3"} {
		dbs[g] = testenv.Database(t, e.NodeCluster, g)
		// One lane on g1: its moves run one after another, as the graph says.
		maxTasks := map[bool]int{true: 1, false: 2}[g == "g1"]
		node := deckhandtype.Node{Name: g + "_primary", DSN: e.Proxy.DSN(dbs[g], pgcluster.Superuser), Group: g, MaxTasks: maxTasks}
		if err := e.Client.AddNode(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	owner := fmt.Sprintf("rebalancer_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := e.NodeCluster.CreateRole(ctx, owner, "LOGIN REPLICATION NOSUPERUSER"); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{owner}.Sanitize()
	t.Cleanup(func() {
		for _, db := range dbs {
			_ = e.NodeCluster.Exec(context.Background(), db, "DROP OWNED BY "+q)
		}
		_ = e.NodeCluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+q)
	})
	tenants := map[string]int{"t1": 4000, "t2": 3000, "t3": 2000, "t4": 1000, "t5": 2500}
	home := map[string]string{"t1": "g1", "t2": "g1", "t3": "g1", "t4": "g1", "t5": "g2"}
	for _, db := range dbs {
		e.NodeExec(db, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+q)
	}
	sums := map[string]string{}
	for s, rows := range tenants {
		conn := e.NodeConn(dbs[home[s]], owner)
		_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %[1]s;
			CREATE TABLE %[1]s.orders (id int PRIMARY KEY, note text);
			INSERT INTO %[1]s.orders SELECT g, repeat(md5(g::text), 20) FROM generate_series(1, %[2]d) g`, s, rows))
		if err != nil {
			t.Fatal(err)
		}
		sums[s] = checksum(t, e, dbs[home[s]], s)
	}

	e.WorkerWith([]engine.Feature{testenv.Kind(move.Kind, false, move.Mover{Cleaner: e.Cleaner()})}, e.Cleaner())
	r := deckhand(t, "", "--catalog", e.DSN, "rebalance", "--groups", "g1,g2,g3", "--owner", owner, "--threshold", "20%", "-o", "json")
	want(t, r, 0)
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.JobID == nil || len(p.Moves) < 2 || !p.Balanced {
		t.Fatalf("%v\n%s", err, r)
	}
	job := e.Wait(*p.JobID, 3*time.Minute)
	if job.State != deckhandtype.JobFinished {
		d, _ := e.Client.Job(ctx, *p.JobID)
		for _, task := range d.Tasks {
			t.Logf("%s %s: %v", task.Name, task.State, task.LastError)
		}
		t.Fatalf("rebalance job %d: %s", *p.JobID, job.State)
	}

	where := map[string]string{}
	for s, g := range home {
		where[s] = g
	}
	for _, m := range p.Moves {
		where[m.Schema] = m.To
	}
	placements, err := e.Client.Catalog().Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]deckhandtype.Placement{}
	for _, pl := range placements {
		placed[pl.Schema] = pl
	}
	for _, m := range p.Moves {
		if pl := placed[m.Schema]; pl.Group != m.To || pl.JobID == nil || *pl.JobID != *p.JobID || pl.MovingJobID != nil {
			t.Errorf("placement of %s after the rebalance: %+v, want group %s", m.Schema, pl, m.To)
		}
	}
	for s, g := range where {
		if got := checksum(t, e, dbs[g], s); got != sums[s] {
			t.Errorf("schema %s on %s: checksum %s, had %s", s, g, got, sums[s])
		}
	}
	r = deckhand(t, "", "--catalog", e.DSN, "rebalance", "status", "-o", "json")
	want(t, r, 0)
	var s deckhandtype.RebalanceStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.JobID != *p.JobID || s.Done.Moves != len(p.Moves) ||
		s.Left.Moves+s.Running.Moves+s.Failed.Moves != 0 {
		t.Errorf("status after the rebalance: %v\n%s", err, r.stdout)
	}
	// The graph held: a move started only once the moves it depends on had finished.
	for i, step := range p.Steps {
		for _, d := range step.DependsOn {
			before, after := s.Moves[d], s.Moves[i]
			if before.FinishedAt == nil || after.StartedAt == nil || after.StartedAt.Before(*before.FinishedAt) {
				t.Errorf("%s started at %v, before %s it depends on finished at %v", after.Name, after.StartedAt, before.Name, before.FinishedAt)
			}
		}
	}
	if len(p.Steps) < 2 || len(p.Steps[1].DependsOn) == 0 {
		t.Errorf("want a plan whose second move waits for the first (one lane on g1): %+v", p.Steps)
	}
	// Once the sources are dropped (when no reader uses them), the groups are balanced.
	testenv.Eventually(t, time.Minute, func() bool {
		for _, m := range p.Moves {
			if schemaIn(t, e, dbs[m.From], m.Schema) {
				return false
			}
		}
		return true
	}, "the moved schemas dropped from their sources")
	r = deckhand(t, "", "--catalog", e.DSN, "rebalance", "--groups", "g1,g2,g3", "--owner", owner, "--threshold", "20%", "--dry-run", "-o", "json")
	want(t, r, 0)
	var again planJSON
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || len(again.Moves) != 0 || !again.Balanced {
		t.Errorf("dry run after the rebalance: %v\n%s", err, r.stdout)
	}
	for g, b := range p.After {
		if again.Before[g] < b*8/10 || again.Before[g] > b*12/10 {
			t.Errorf("group %s holds %d bytes, the plan said %d", g, again.Before[g], b)
		}
	}
	t.Logf("rebalance job %d: %d moves, %s", *p.JobID, len(p.Moves), strconv.Quote(fmt.Sprint(p.After)))
}

func checksum(t *testing.T, e *testenv.Proxied, db, schema string) string {
	t.Helper()
	conn := e.NodeConn(db, pgcluster.Superuser)
	defer conn.Close(context.Background())
	var sum string
	err := conn.QueryRow(context.Background(), `SELECT md5(string_agg(r::text, '|' ORDER BY r.id)) FROM `+
		pgx.Identifier{schema, "orders"}.Sanitize()+` r`).Scan(&sum)
	if err != nil {
		t.Fatalf("checksum of %s on %s: %v", schema, db, err)
	}
	return sum
}

func schemaIn(t *testing.T, e *testenv.Proxied, db, schema string) bool {
	t.Helper()
	conn := e.NodeConn(db, pgcluster.Superuser)
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}
