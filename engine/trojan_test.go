package engine_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// intruder creates a low-privilege role and plants trojans in db's public schema as it.
func intruder(t *testing.T, e *testenv.Env, db string) string {
	t.Helper()
	app := e.Role("app")
	testenv.PlantTrojans(t, e.Cluster, db, app)
	return app
}

// A low-privilege role plants look-alikes of pg_catalog's functions and operators in a schema
// on the task's search_path; an admin's tasks owned by the superuser run on that node. Nothing
// deckhand sends in the superuser's session may call them: not the session's preparation, not
// the drop's name resolution and probes, with pg_catalog implicitly first or listed last.
func TestTrojansInOwnerSessions(t *testing.T) {
	for _, tc := range []struct {
		name, searchPath string
		drop             bool
	}{
		{"sql, public on the search_path", "public", false},
		{"sql, pg_catalog listed last", "public, pg_catalog", false},
		{"drop, public on the search_path", "public", true},
		{"drop, pg_catalog listed last", "public, pg_catalog", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testenv.New(t, drop.Feature())
			db := e.AddNode("n1", 4)
			app := intruder(t, e, db)
			e.Exec(db, `CREATE TABLE public.victim (id int); CREATE TABLE public.victim2 (id int)`)
			e.Worker(engine.Config{})

			job := &spec.Job{SearchPath: tc.searchPath}
			if tc.drop {
				payload, _ := json.Marshal(map[string]any{"tables": []string{"victim", "public.victim2"}})
				job.Tasks = []spec.Task{{Name: "drop", Kind: "drop", Node: "n1", Payload: payload, MaxAttempts: 1}}
			} else {
				// Several tasks, so that pooled sessions are reused after a task's search_path.
				job.Tasks = []spec.Task{
					{Name: "a", Node: "n1", SQL: "CREATE TABLE ran_a (x int)", MaxAttempts: 1},
					{Name: "b", Node: "n1", SQL: "CREATE TABLE ran_b (x int)", MaxAttempts: 1, DependsOn: []string{"a"}},
					{Name: "c", Node: "n1", SQL: "CREATE TABLE ran_c (x int)", MaxAttempts: 1, DependsOn: []string{"b"}},
				}
			}
			id := submit(t, e, job)
			if got := e.Wait(id, 30*time.Second); got.State != deckhandtype.JobFinished {
				t.Errorf("job %s: %s", got.State, explain(detail(t, e, id)))
			}
			testenv.NoTrojanRan(t, e.Cluster, db, app)

			rows, _ := e.Pool(db).Query(ctx, `SELECT relname::text FROM pg_class WHERE relname IN ('victim', 'victim2', 'ran_a', 'ran_b', 'ran_c') AND relnamespace = 'public'::regnamespace ORDER BY 1`)
			present, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			want := "ran_a ran_b ran_c victim victim2"
			if tc.drop {
				want = ""
			}
			if got := strings.Join(present, " "); got != want {
				t.Errorf("tables in public: %q, want %q", got, want)
			}
		})
	}
}

// The leader terminates the backend of a task whose worker died, as the task's owner (here the
// superuser): the trojans planted meanwhile must not run in that session either.
func TestTrojansInLeaderTerminate(t *testing.T) {
	e := testenv.New(t, drop.Feature())
	db := e.AddNode("n1", 4)
	app := e.Role("app")
	e.Exec(db, `CREATE TABLE public.rerun (x int)`)
	victim := e.Serve("--lease", "1s", "--maintenance-interval", "100ms")
	// The first attempt sleeps until it is terminated; the re-run finds the marker and ends.
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", MaxAttempts: 3,
		SQL: `SELECT pg_sleep(600) WHERE NOT EXISTS (SELECT FROM public.rerun)`}}})
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'deckhand task %' AND query LIKE '%pg_sleep%'`).Scan(&n) //nolint:errcheck
		return n == 1
	}, "the first attempt runs on the node")
	testenv.PlantTrojans(t, e.Cluster, db, app)
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Cmd.Wait()
	e.Exec(db, `INSERT INTO public.rerun VALUES (1)`)
	e.Worker(engine.Config{LeaseTTL: time.Second})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Errorf("job %s: %s", job.State, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Outcome != deckhandtype.OutcomeLost {
		t.Errorf("attempts = %s, want the first lost to the dead worker", explain(d))
	}
	testenv.NoTrojanRan(t, e.Cluster, db, app)
	var left int
	e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()`).Scan(&left) //nolint:errcheck
	if left != 0 {
		t.Errorf("the orphaned backend was not terminated")
	}
}

// A job whose captured search_path is empty (written before it was captured, or by hand) runs
// its SQL with PostgreSQL's default, "$user", public — not with the pg_catalog-only path that
// deckhand's own statements use.
func TestEmptySearchPathIsPostgresDefault(t *testing.T) {
	e := testenv.New(t, drop.Feature())
	db := e.AddNode("n1", 4)
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", SQL: "CREATE TABLE made_here (x int)", MaxAttempts: 1}}})
	e.Exec(e.DB, `ALTER TABLE deckhand.job DISABLE TRIGGER job_identity`)
	e.Exec(e.DB, `UPDATE deckhand.job SET search_path = '' WHERE id = $1`, id)
	e.Exec(e.DB, `ALTER TABLE deckhand.job ENABLE TRIGGER job_identity`)
	e.Worker(engine.Config{})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s: %s", job.State, explain(detail(t, e, id)))
	}
	var schema string
	if err := e.Pool(db).QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class WHERE relname = 'made_here'`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if schema != "public" {
		t.Errorf("the table went to schema %q, want public", schema)
	}
}
