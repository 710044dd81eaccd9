package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A task runs connected as its owner role, so nothing in its SQL can climb back to the
// worker's privileges: RESET ROLE, RESET SESSION AUTHORIZATION and set_config('role', ...)
// all stay within the owner, directly or inside a DO block.
func TestTaskCannotExceedOwnerPrivileges(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	app := e.Role("app")
	q := pgx.Identifier{app}.Sanitize()
	e.Exec(db, `CREATE TABLE secret (v text); INSERT INTO secret VALUES ('s3cr3t')`)
	e.Exec(db, `CREATE TABLE whoami (session_user_name text, current_user_name text)`)
	e.Exec(db, `GRANT INSERT ON whoami TO `+q)
	e.Worker(engine.Config{})

	escapes := map[string]string{
		"reset_role":       `RESET ROLE; SELECT * FROM secret`,
		"reset_session":    `RESET SESSION AUTHORIZATION; SELECT * FROM secret`,
		"set_session":      `SET SESSION AUTHORIZATION postgres; SELECT * FROM secret`,
		"set_role":         `SET ROLE postgres`,
		"set_config":       `SELECT set_config('role', 'postgres', false); SELECT * FROM secret`,
		"do_set_config":    `DO $$ BEGIN PERFORM set_config('role', 'postgres', false); END $$; SELECT * FROM secret`,
		"do_reset_role":    `DO $$ BEGIN EXECUTE 'RESET ROLE'; PERFORM * FROM secret; END $$`,
		"do_session_auth":  `DO $$ BEGIN EXECUTE 'SET SESSION AUTHORIZATION postgres'; END $$`,
		"alter_self_super": `ALTER ROLE CURRENT_USER SUPERUSER`,
	}
	tasks := []spec.Task{{Name: "who", Node: "n1", Owner: app,
		SQL: `RESET ROLE; INSERT INTO whoami VALUES (session_user, current_user)`}}
	for name, sql := range escapes {
		tasks = append(tasks, spec.Task{Name: name, Node: "n1", Owner: app, SQL: sql, MaxAttempts: 1})
	}
	id := submit(t, e, &spec.Job{Tasks: tasks})
	e.Wait(id, 30*time.Second)
	d := detail(t, e, id)
	for _, task := range d.Tasks {
		if task.Name == "who" {
			if task.State != deckhandtype.TaskDone {
				t.Fatalf("who: %s %v", task.State, task.LastError)
			}
			continue
		}
		if task.State != deckhandtype.TaskFailed {
			t.Errorf("%s: escape attempt ended %s, want failed", task.Name, task.State)
			continue
		}
		if task.LastError == nil || task.LastError.SQLState != "42501" {
			t.Errorf("%s: error %+v, want permission denied (42501)", task.Name, task.LastError)
		}
	}
	var sessionUser, currentUser string
	err := e.Pool(db).QueryRow(ctx, `SELECT session_user_name, current_user_name FROM whoami`).Scan(&sessionUser, &currentUser)
	if err != nil {
		t.Fatal(err)
	}
	if sessionUser != app || currentUser != app {
		t.Errorf("task ran as session_user=%s current_user=%s, want %s for both", sessionUser, currentUser, app)
	}
}

// Submitting a task for an owner requires membership in that role; the refusal writes nothing.
func TestSubmitterMustBeMemberOfOwner(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	alice := e.Role("alice")
	bob := e.Role("bob")
	team := e.Role("team")
	qa := pgx.Identifier{alice}.Sanitize()
	e.Exec("postgres", `GRANT `+pgx.Identifier{team}.Sanitize()+` TO `+qa)
	e.Exec("postgres", `GRANT deckhand_submitter TO `+qa)
	asAlice, err := engine.Open(ctx, e.Cluster.DSN(e.DB, alice))
	if err != nil {
		t.Fatal(err)
	}
	defer asAlice.Close()

	_, err = asAlice.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", Owner: bob, SQL: "SELECT 1"}}})
	if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), "not a member of role") {
		t.Fatalf("submit as %s for %s: err = %v, want a refusal", alice, bob, err)
	}
	_, err = asAlice.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", Owner: "no_such_role", SQL: "SELECT 1"}}})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("unknown owner: err = %v", err)
	}
	jobs, err := e.Client.Jobs(ctx, deckhandtype.JobFilter{})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("refused submissions wrote %d jobs (err %v)", len(jobs), err)
	}

	// As a member of team, and as herself (the default owner), alice may submit.
	id, err := asAlice.Submit(ctx, &spec.Job{Tasks: []spec.Task{
		{Name: "as_team", Node: "n1", Owner: team, SQL: "SELECT 1"},
		{Name: "as_self", Node: "n1", SQL: "SELECT 1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := detail(t, e, id)
	if d.SubmittedBy != alice || d.Tasks[1].Owner != alice {
		t.Errorf("submitted_by=%s owner=%s, want %s", d.SubmittedBy, d.Tasks[1].Owner, alice)
	}
}

// A catalog row forged to borrow a role the submitter is not a member of is refused by the
// worker on the node itself: even someone who could bypass the catalog's own protections (the
// schema's owner, here disabling the trigger that keeps a submitter fixed) gains no role.
func TestWorkerRechecksMembership(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	alice := e.Role("alice")
	bob := e.Role("bob")
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "t", Node: "n1", Owner: bob, SQL: "SELECT 1", MaxAttempts: 1}}})
	// Simulate tampering: pretend alice submitted it.
	e.ForgeSubmitter(id, alice)
	e.Worker(engine.Config{})
	job := e.Wait(id, 30*time.Second)
	d := detail(t, e, id)
	if job.State != deckhandtype.JobFailed || d.Tasks[0].LastError == nil || !strings.Contains(d.Tasks[0].LastError.Message, "not a member") {
		t.Fatalf("job %s, task error %+v: want refused by the worker", job.State, d.Tasks[0].LastError)
	}
}
