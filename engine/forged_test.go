package engine_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// The leader terminates an orphan's backend only in a session whose owner check passed: with
// a forged submitter no attempt can have run as the owner, so nothing is terminated. The task
// is handed back all the same, and its next attempt is refused on the node.
func TestForgedOrphanIsNotTerminated(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	alice := e.Role("alice")
	victim := e.Serve("--lease", "1s", "--maintenance-interval", "100ms")
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", MaxAttempts: 3, SQL: `SELECT pg_sleep(600)`}}})
	var pid int32
	testenv.Eventually(t, 20*time.Second, func() bool {
		err := e.Pool(db).QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'deckhand task %' AND query LIKE '%pg_sleep(600)%'`).Scan(&pid)
		return err == nil
	}, "the first attempt runs on the node")
	t.Cleanup(func() { e.Exec("postgres", `SELECT pg_terminate_backend($1)`, pid) })
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Cmd.Wait()
	e.ForgeSubmitter(id, alice)

	e.Worker(engine.Config{LeaseTTL: time.Second})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s: %s", job.State, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Outcome != deckhandtype.OutcomeLost || d.Attempts[1].Outcome != deckhandtype.OutcomeFailed ||
		d.Attempts[1].Message == nil || !strings.Contains(*d.Attempts[1].Message, "is not a member of role") {
		t.Errorf("attempts: %s; want the first lost, the second refused on the node", explain(d))
	}
	var alive bool
	if err := e.Pool(db).QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if !alive {
		t.Error("the orphaned backend was terminated in a session whose owner check failed")
	}
}

// Settings deckhand sets itself are refused at submission; a job row forged to carry one (a
// search_path that would put the owner's schemas before pg_catalog for deckhand's own
// statements) is refused by the worker before anything runs.
func TestForgedReservedSettingIsRefused(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	id := submit(t, e, &spec.Job{Settings: map[string]string{"work_mem": "8MB"},
		Tasks: []spec.Task{{Name: "t", Node: "n1", SQL: "CREATE TABLE should_not_exist (x int)", MaxAttempts: 1}}})
	e.Exec(e.DB, `ALTER TABLE deckhand.job DISABLE TRIGGER job_identity`)
	e.Exec(e.DB, `UPDATE deckhand.job SET settings = settings || '{"search_path": "public, pg_catalog"}' WHERE id = $1`, id)
	e.Exec(e.DB, `ALTER TABLE deckhand.job ENABLE TRIGGER job_identity`)
	e.Worker(engine.Config{})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s: %s", job.State, explain(detail(t, e, id)))
	}
	d := detail(t, e, id)
	if d.Tasks[0].LastError == nil || !strings.Contains(d.Tasks[0].LastError.Message, `setting "search_path" is not one a job may choose`) {
		t.Errorf("task error %+v: want the forged setting refused", d.Tasks[0].LastError)
	}
	var exists bool
	if err := e.Pool(db).QueryRow(ctx, `SELECT to_regclass('public.should_not_exist') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Errorf("the task ran (table exists: %v, %v)", exists, err)
	}
}
