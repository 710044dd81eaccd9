package engine_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task leaves all it can in its session (settings, a temporary table, a prepared statement, a
// held cursor, an advisory lock, a LISTEN); the next task, in the same pooled backend, finds
// none of it. A task outside a transaction has its session reset by the pool after its
// release; a transactional one has it reset in the round trip of its COMMIT: both are tried.
func TestPooledSessionIsResetBetweenTasks(t *testing.T) {
	for _, inTransaction := range []bool{false, true} {
		t.Run(map[bool]string{false: "outside a transaction", true: "in a transaction"}[inTransaction], func(t *testing.T) {
			testSessionReset(t, inTransaction)
		})
	}
}

func testSessionReset(t *testing.T, inTransaction bool) {
	e := testenv.New(t)
	db := e.AddNode("n1", 1)
	e.Exec(db, `CREATE TABLE seen (task text, pid int, work_mem text, mark text, temp_tables int,
		prepared int, cursors int, advisory int, listening int)`)
	// One slot: both tasks take the pool's one session, one after the other.
	e.Worker(engine.Config{Concurrency: 1})
	observe := func(task string) string {
		return `INSERT INTO public.seen SELECT '` + task + `', pg_backend_pid(), current_setting('work_mem'),
			coalesce(current_setting('leftover.mark', true), ''),
			(SELECT count(*) FROM pg_class WHERE relpersistence = 't' AND relname = 'leftover'),
			(SELECT count(*) FROM pg_prepared_statements WHERE name = 'leftover_stmt'),
			(SELECT count(*) FROM pg_cursors WHERE name = 'leftover_cursor'),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
			(SELECT count(*) FROM pg_listening_channels() c WHERE c = 'leftover_channel');`
	}
	// The LISTEN takes effect at the COMMIT, before task a looks.
	leave := `SET work_mem = '77kB'; SET leftover.mark = 'left'; CREATE TEMP TABLE leftover (x int);
		PREPARE leftover_stmt AS SELECT 1; SELECT pg_advisory_lock(4711); LISTEN leftover_channel;
		BEGIN; DECLARE leftover_cursor CURSOR WITH HOLD FOR SELECT 1; COMMIT;`
	if inTransaction {
		// In the task's own transaction: the held cursor and the LISTEN outlive its COMMIT,
		// which comes after task a looks, so a sees its LISTEN as not yet in force.
		leave = `SET work_mem = '77kB'; SET leftover.mark = 'left'; CREATE TEMP TABLE leftover (x int);
		PREPARE leftover_stmt AS SELECT 1; SELECT pg_advisory_lock(4711); LISTEN leftover_channel;
		DECLARE leftover_cursor CURSOR WITH HOLD FOR SELECT 1;`
	}
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: leave + observe("a"), Transaction: &inTransaction, MaxAttempts: 1},
		{Name: "b", Node: "n1", SQL: observe("b"), MaxAttempts: 1, DependsOn: []string{"a"}},
	}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job = %+v, want finished; attempts: %s", job, explain(detail(t, e, id)))
	}
	type seen struct {
		pid                                          int
		workMem, mark                                string
		temp, prepared, cursors, advisory, listening int
	}
	got := map[string]seen{}
	rows, err := e.Pool(db).Query(ctx, `SELECT task, pid, work_mem, mark, temp_tables, prepared, cursors, advisory, listening FROM seen`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var task string
		var s seen
		if err := rows.Scan(&task, &s.pid, &s.workMem, &s.mark, &s.temp, &s.prepared, &s.cursors, &s.advisory, &s.listening); err != nil {
			t.Fatal(err)
		}
		got[task] = s
	}
	a, b := got["a"], got["b"]
	listened := map[bool]int{false: 1, true: 0}[inTransaction]
	if a.workMem != "77kB" || a.mark != "left" || a.temp != 1 || a.prepared != 1 || a.cursors != 1 || a.advisory != 1 || a.listening != listened {
		t.Fatalf("task a did not leave its state behind as it should have: %+v", a)
	}
	if b.pid != a.pid {
		t.Fatalf("task b ran in backend %d, task a in %d: the test needs them to share a session", b.pid, a.pid)
	}
	if b.workMem == "77kB" || b.mark != "" || b.temp != 0 || b.prepared != 0 || b.cursors != 0 || b.advisory != 0 || b.listening != 0 {
		t.Errorf("task b found what task a left in the session: %+v", b)
	}
}

// A task whose COMMIT the node refuses (a deferred constraint) fails with the node's error,
// nothing of it is kept, and its session, reset in the same round trip, serves the next task
// clean.
func TestTaskWhoseCommitIsRefused(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 1)
	e.Exec(db, `CREATE TABLE parent (id int PRIMARY KEY);
		CREATE TABLE child (parent int REFERENCES parent DEFERRABLE INITIALLY DEFERRED);
		CREATE TABLE seen (pid int, work_mem text)`)
	e.Worker(engine.Config{Concurrency: 1})
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", MaxAttempts: 1,
			SQL: `SET work_mem = '77kB'; INSERT INTO public.child VALUES (42); INSERT INTO public.seen SELECT pg_backend_pid(), 'a'`},
	}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job = %+v, want failed; attempts: %s", job, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	if a := d.Tasks[0]; a.State != deckhandtype.TaskFailed || a.LastError == nil || a.LastError.SQLState != "23503" {
		t.Fatalf("task a = %+v, want failed with the foreign key's 23503 at its COMMIT; attempts: %s", a, explain(d))
	}
	var children int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM child`).Scan(&children); err != nil || children != 0 {
		t.Fatalf("child rows = %d (%v), want none: the refused COMMIT keeps nothing", children, err)
	}
	// The same session runs the next task clean.
	id = submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "b", Node: "n1", MaxAttempts: 1, SQL: `INSERT INTO public.seen SELECT pg_backend_pid(), current_setting('work_mem')`},
	}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("job = %+v, want finished; attempts: %s", job, explain(detail(t, e, id)))
	}
	var workMem string
	var rows int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*), max(work_mem) FROM seen`).Scan(&rows, &workMem); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || workMem == "77kB" {
		t.Fatalf("seen holds %d rows, work_mem %q: want only the next task's, without a's setting", rows, workMem)
	}
}
