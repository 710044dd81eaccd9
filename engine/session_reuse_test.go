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
// none of it.
func TestPooledSessionIsResetBetweenTasks(t *testing.T) {
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
	f := false
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: leave + observe("a"), Transaction: &f, MaxAttempts: 1},
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
	if a.workMem != "77kB" || a.mark != "left" || a.temp != 1 || a.prepared != 1 || a.cursors != 1 || a.advisory != 1 || a.listening != 1 {
		t.Fatalf("task a did not leave its state behind as it should have: %+v", a)
	}
	if b.pid != a.pid {
		t.Fatalf("task b ran in backend %d, task a in %d: the test needs them to share a session", b.pid, a.pid)
	}
	if b.workMem == "77kB" || b.mark != "" || b.temp != 0 || b.prepared != 0 || b.cursors != 0 || b.advisory != 0 || b.listening != 0 {
		t.Errorf("task b found what task a left in the session: %+v", b)
	}
}
