package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// Advisory locks need no privilege: any role that may connect to the catalog's database may
// take any key and keep it. With max_running_tasks set, claims serialized on an advisory lock
// of a fixed key: a role with no deckhand role at all that held that key stopped every
// worker from claiming anything, every user's tasks waiting for as long as it kept it.
func TestAttackHeldAdvisoryLockStopsNoClaim(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	e.Exec(e.DB, `SELECT deckhand.set_setting('max_running_tasks', '8')`)
	nobody := e.Role("nobody")
	conn, err := pgx.Connect(ctx, e.RoleDSN(nobody))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Every key a claim could use: the one it used, and any other a role could guess.
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock(7306086::pg_catalog.int8)`); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{})
	job := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "one", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1"}}})
	if got := e.Wait(job, 15*time.Second); got.State != deckhandtype.JobFinished {
		t.Fatalf("a job while a role holds an advisory lock: %s", got.State)
	}
}
