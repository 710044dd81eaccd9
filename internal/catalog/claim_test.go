package catalog_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// A claim reads what it claims and little more, however many tasks have finished and whatever
// the planner believed when it planned the claim: each runnable set has an index that is both
// its filter and its order, and claims run with probes only (probesOnly). The catalog runs
// generic plans, made once per connection, so the claim is planned here four ways — on the
// empty catalog before it grew, then on the grown one with no statistics, true ones, and ones
// taken while most tasks were runnable or running (the planner then expects them everywhere) —
// and its buffers counted, idle and with work. The finished tasks are 50,000 here (a walk over
// them reads over a thousand buffers); DECKHAND_TEST_FINISHED sets another number, such as
// 1000000.
func TestClaimReadsFewBuffersWhateverThePlanner(t *testing.T) {
	finished := 50_000
	if s := os.Getenv("DECKHAND_TEST_FINISHED"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("DECKHAND_TEST_FINISHED: %v", err)
		}
		finished = n
	}
	cat, cl, db := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	exec := execOn(t, cat)
	// Only the test changes what the planner knows.
	for _, table := range []string{"task", "task_dep", "task_attempt", "job", "node"} {
		exec(`ALTER TABLE deckhand.` + table + ` SET (autovacuum_enabled = false)`)
	}
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES ('n1', 'host=n1', 'g1', 'primary', 10)`)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 10, 'infinity')`)
	worker, err := catalog.Open(ctx, cl.DSN(db, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	// A session that plans the claim while the catalog is empty, and keeps the plans.
	early, err := worker.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Release()
	defer early.Conn().Close(ctx) //nolint:errcheck
	planned := prepareClaim(t, early.Conn())
	planned.idle(t, early.Conn())

	// History: finished tasks of every kind of set, with their attempts.
	seedTasks := func(description, state string, n int) {
		t.Helper()
		exec(`
			WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ($1, 'noop', $2) RETURNING id),
			t AS (
				INSERT INTO deckhand.task (job_id, name, kind, node, node_group, owner, max_attempts, timeout, state,
					attempts, runs, attempt_token, started_at, finished_at)
				SELECT j.id, 't' || g, CASE WHEN g % 3 = 1 THEN 'sql' ELSE 'noop' END,
					CASE WHEN g % 3 = 1 THEN 'n1' END, CASE WHEN g % 3 = 2 THEN 'g1' END, 'app', 3, '1 hour', $3,
					1, 1, g, now(), CASE WHEN $3 = 'done' THEN now() END
				FROM j, generate_series(1, $2) g
				RETURNING id, attempt_token)
			INSERT INTO deckhand.task_attempt (task_id, token, attempt, outcome, started_at, finished_at)
			SELECT id, attempt_token, 1, 'done', now(), now() FROM t`, description, n, state)
	}
	seedTasks("history", "done", finished)

	check := func(t *testing.T, conn *pgx.Conn, c claimProbe) {
		t.Helper()
		// Nothing runnable: the claim a worker makes every poll.
		if lock, claim := c.idle(t, conn); lock > 40 || claim > 40 {
			t.Errorf("an idle claim read %d buffers locking nodes and %d claiming", lock, claim)
		}
		// Work in every set: the claim reads about what it takes.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, catalog.ProbesOnly); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, catalog.OrderedProbes); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `
			WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('work', 'noop', 30) RETURNING id)
			INSERT INTO deckhand.task (job_id, name, kind, node, node_group, owner, max_attempts, timeout, state)
			SELECT j.id, 'w' || g, CASE WHEN g % 3 = 1 THEN 'sql' ELSE 'noop' END,
				CASE WHEN g % 3 = 1 THEN 'n1' END, CASE WHEN g % 3 = 2 THEN 'g1' END, 'app', 3, '1 hour', 'runnable'
			FROM j, generate_series(1, 30) g`); err != nil {
			t.Fatal(err)
		}
		// 10 tasks anywhere, and the node's 10 slots for its own tasks and its group's. Locking
		// reads a few buffers more than when idle: each set's probe (claimSetsSQL) finds a task.
		_, lockEvery := explainBuffers(t, conn, c.lockEvery)
		_, lock := explainBuffers(t, conn, c.lock)
		lock = max(lock, lockEvery)
		if n, b := explainBuffers(t, conn, c.claim); lock > 60 || n != 20 || b > 40+20*30 {
			t.Errorf("the claim locked nodes reading %d buffers, claimed %d tasks (want 20) reading %d", lock, n, b)
		}
	}
	t.Run("planned while the catalog was empty", func(t *testing.T) { check(t, early.Conn(), planned) })

	// Idle claims must not be a walk over an index's dead entries either.
	exec(`VACUUM deckhand.task`)
	for _, stats := range []struct {
		name    string
		prepare func()
	}{
		{"never analyzed", func() {}},
		{"analyzed", func() { exec(`ANALYZE deckhand.task`) }},
		{"analyzed while most tasks were runnable or running", func() {
			seedTasks("burst", "runnable", finished/2)
			seedTasks("busy", "running", finished/2)
			exec(`ANALYZE deckhand.task`)
			exec(`DELETE FROM deckhand.job WHERE description IN ('burst', 'busy')`)
			exec(`VACUUM deckhand.task`) // removes the rows, keeps the statistics
		}},
	} {
		t.Run(stats.name, func(t *testing.T) {
			stats.prepare()
			// A new session makes its generic plans under these statistics; the first round
			// reads the system catalogs into it.
			conn, err := worker.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			defer conn.Conn().Close(ctx) //nolint:errcheck
			c := prepareClaim(t, conn.Conn())
			c.idle(t, conn.Conn())
			check(t, conn.Conn(), c)
		})
	}
}

// claimProbe is a claim prepared in a session, its two statements run under EXPLAIN ANALYZE
// with the generic plans the session makes, as a worker's session does: a claim for worker 1
// of up to 100 tasks (node n1 has 10 slots).
type claimProbe struct{ lockEvery, lock, claim string }

// idle runs the claim in a transaction of its own, with probes only, as a claim runs, and
// returns the buffers of each statement.
func (c claimProbe) idle(t *testing.T, conn *pgx.Conn) (lock, claim int) {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, catalog.ProbesOnly); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, catalog.OrderedProbes); err != nil {
		t.Fatal(err)
	}
	_, lockEvery := explainBuffers(t, conn, c.lockEvery)
	_, lock = explainBuffers(t, conn, c.lock)
	_, claim = explainBuffers(t, conn, c.claim)
	return max(lock, lockEvery), claim
}

func prepareClaim(t *testing.T, conn *pgx.Conn) claimProbe {
	t.Helper()
	args := pgx.StrictNamedArgs{"limit": 100, "now": (*time.Time)(nil), "worker": int64(1), "spread": 0.5,
		"ahead_nodes": []string{}, "ahead_counts": []int32{}}
	sql, params, err := args.RewriteQuery(ctx, conn, catalog.ClaimSQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	lockArgs := pgx.StrictNamedArgs{"limit": 100, "nodes": 64, "start_node": "", "start_group": "", "now": (*time.Time)(nil)}
	lockSQL, lockParams, err := lockArgs.RewriteQuery(ctx, conn, catalog.LockNodesSQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	everyArgs := pgx.StrictNamedArgs{"start_node": ""}
	everySQL, everyParams, err := everyArgs.RewriteQuery(ctx, conn, catalog.LockEveryNodeSQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var c claimProbe
	for _, s := range []struct {
		sql    string
		params []any
		into   *string
	}{{everySQL, everyParams, &c.lockEvery}, {lockSQL, lockParams, &c.lock}, {sql, params, &c.claim}} {
		probes++
		stmt := fmt.Sprintf("probe_%d", probes)
		if _, err := conn.Prepare(ctx, stmt, s.sql); err != nil {
			t.Fatal(err)
		}
		literals := make([]string, len(s.params))
		for i, p := range s.params {
			literals[i] = literal(p)
		}
		*s.into = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE " + stmt
		if len(literals) > 0 {
			*s.into += "(" + strings.Join(literals, ", ") + ")"
		}
	}
	return c
}

// explainBuffers runs an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) and returns the rows and
// buffers of its plan; verbose tests log the plan's outline.
func explainBuffers(t *testing.T, conn *pgx.Conn, explain string) (rows, buffers int) {
	t.Helper()
	var out []byte
	if err := conn.QueryRow(ctx, explain).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
			Rows int `json:"Actual Rows"`
		}
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN: %v (%s)", err, out)
	}
	buffers = plans[0].Plan.Hit + plans[0].Plan.Read
	if testing.Verbose() {
		var plan []map[string]any
		if err := json.Unmarshal(out, &plan); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		outline(&b, plan[0]["Plan"].(map[string]any), "")
		t.Logf("%d rows, %d buffers:\n%s", plans[0].Plan.Rows, buffers, b.String())
	}
	return plans[0].Plan.Rows, buffers
}

var probes int

// outline writes one line per plan node that was run: its type, index or table, rows and buffers.
func outline(b *strings.Builder, node map[string]any, indent string) {
	if loops, _ := node["Actual Loops"].(float64); loops == 0 {
		return
	}
	fmt.Fprintf(b, "%s%v", indent, node["Node Type"])
	for _, k := range []string{"Index Name", "Relation Name", "CTE Name"} {
		if v, ok := node[k]; ok {
			fmt.Fprintf(b, " %v", v)
		}
	}
	fmt.Fprintf(b, " rows=%v buffers=%v\n", node["Actual Rows"], node["Shared Hit Blocks"].(float64)+node["Shared Read Blocks"].(float64))
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		outline(b, c.(map[string]any), indent+"  ")
	}
}

// literal is v written as an SQL literal, for EXECUTE's arguments.
func literal(v any) string {
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case []string:
		return "'{" + strings.Join(v, ",") + "}'"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []int32:
		s := make([]string, len(v))
		for i, n := range v {
			s[i] = strconv.Itoa(int(n))
		}
		return "'{" + strings.Join(s, ",") + "}'"
	case *time.Time:
		if v == nil {
			return "NULL"
		}
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	panic(fmt.Sprintf("literal: %T", v))
}

// A task with thousands of dependents releases them all in its completion, in one pass over
// them: no row it locks carries more than its own dependent (a join to FOR UPDATE copies the
// joined rows whole into every locked row), and nothing spills to disk.
func TestCompletionOfAFanOutIsOnePass(t *testing.T) {
	const fan = 5000
	cat := migratedCatalog(t)
	job := catalog.NewJob{Description: "fan-out", Kind: "noop", Tasks: []catalog.NewTask{{Name: "root", Kind: "noop",
		Owner: "app", MaxAttempts: 1, Timeout: time.Hour}}}
	for i := range fan {
		job.Tasks = append(job.Tasks, catalog.NewTask{Name: "leaf" + strconv.Itoa(i), Kind: "noop", Owner: "app",
			MaxAttempts: 1, Timeout: time.Hour, DependsOn: []string{"root"}})
	}
	if _, err := cat.InsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 1, 'infinity')`); err != nil {
		t.Fatal(err)
	}
	claimed, err := cat.Claim(ctx, 1, 10)
	if err != nil || len(claimed) != 1 || !claimed[0].HasDependents {
		t.Fatalf("claimed %+v (%v), want the root, which has dependents", claimed, err)
	}
	for _, outcome := range []deckhandtype.Outcome{deckhandtype.OutcomeDone, deckhandtype.OutcomeFailed} {
		t.Run(string(outcome), func(t *testing.T) {
			args, err := catalog.CompleteArgs([]catalog.Result{{TaskID: claimed[0].ID, Token: claimed[0].Token, WorkerID: 1, Outcome: outcome}})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := cat.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if _, err := tx.Exec(ctx, catalog.ProbesOnly); err != nil {
				t.Fatal(err)
			}
			var out []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+catalog.CompleteSQL, pgx.StrictNamedArgs(args)).Scan(&out); err != nil {
				t.Fatal(err)
			}
			var plans []struct {
				Plan struct {
					Hit     int `json:"Shared Hit Blocks"`
					Read    int `json:"Shared Read Blocks"`
					Written int `json:"Temp Written Blocks"`
				}
			}
			if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
				t.Fatalf("EXPLAIN: %v", err)
			}
			p := plans[0].Plan
			var tree []map[string]any
			if err := json.Unmarshal(out, &tree); err != nil {
				t.Fatal(err)
			}
			if rows := rowsProduced(tree[0]["Plan"].(map[string]any)); p.Written > 0 || p.Hit+p.Read > 30*fan || rows > 50*fan {
				t.Errorf("releasing %d dependents read %d buffers, produced %.0f rows in all and wrote %d temporary blocks",
					fan, p.Hit+p.Read, rows, p.Written)
			}
			var moved int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM deckhand.task WHERE state IN ('runnable', 'unscheduled')`).Scan(&moved); err != nil || moved != fan {
				t.Errorf("%d dependents released or unscheduled (%v), want %d", moved, err, fan)
			}
		})
	}
}

// rowsProduced is the number of rows every node of a plan produced, over all its loops.
func rowsProduced(node map[string]any) float64 {
	rows, _ := node["Actual Rows"].(float64)
	loops, _ := node["Actual Loops"].(float64)
	n := rows * loops
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsProduced(c.(map[string]any))
	}
	return n
}
