package engine_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// Each owner logs in with its own password, from its own line in the worker's pgpass file;
// neither the environment nor the catalog holds a password (the node's conninfo names the
// superuser, whose password would be of no use to the owners). An owner without a line fails
// at once with a clear reason instead of being retried.
func TestOwnersLogInWithTheirOwnPgpassLine(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	alice, bob := e.Role("alice"), e.Role("bob")
	nopass := fmt.Sprintf("nopass_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if err := e.Cluster.CreateRole(ctx, nopass, "LOGIN PASSWORD 'only-the-server-knows'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Exec("postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{nopass}.Sanitize()) })
	e.Exec(db, `CREATE TABLE whoami (task text, session_user_name text); GRANT INSERT ON whoami TO PUBLIC`)
	e.Worker(engine.Config{})

	ins := func(name string) string { return `INSERT INTO whoami VALUES ('` + name + `', session_user)` }
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "alice", Node: "n1", Owner: alice, SQL: ins("alice")},
		{Name: "bob", Node: "n1", Owner: bob, SQL: ins("bob")},
		{Name: "nopass", Node: "n1", Owner: nopass, SQL: ins("nopass"), MaxAttempts: 3},
	}})
	e.Wait(id, 30*time.Second)
	d := detail(t, e, id)
	for _, task := range d.Tasks {
		switch task.Name {
		case "alice", "bob":
			if task.State != deckhandtype.TaskDone {
				t.Errorf("%s: %s %+v, want done", task.Name, task.State, task.LastError)
			}
		case "nopass":
			if task.State != deckhandtype.TaskFailed || task.Attempts != 1 {
				t.Errorf("nopass: %s after %d attempts, want failed after 1 (a refused login is permanent)", task.State, task.Attempts)
			}
			if task.LastError == nil || !strings.Contains(task.LastError.Message, "password authentication failed") ||
				!strings.Contains(task.LastError.Message, nopass) || !strings.Contains(task.LastError.Message, "pgpass") {
				t.Errorf("nopass: error %+v, want the refused login, the role and where its password belongs", task.LastError)
			}
		}
	}
	rows, _ := e.Pool(db).Query(ctx, `SELECT task || '=' || session_user_name FROM whoami ORDER BY 1`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alice=" + alice, "bob=" + bob}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sessions: %v, want %v", got, want)
	}
}
