package engine_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A worker dies right after its task committed on the node, and before the leader rescues the
// attempt the submitter's membership in the owner role is revoked there. The rescue cannot
// act as the owner any more, but the attempt did run as it and committed: the task is done,
// and must be recorded so, not handed back as if no attempt could have run (its next attempt
// would be refused and the job fail, or, with the membership back, apply the effect twice).
func TestRescueOfACommittedAttemptWhoseOwnerIsRefusedIsDone(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	owner := e.Role("owner")
	sub, c := e.Submitter("sub", owner)
	e.Exec(db, `CREATE TABLE hits (n int)`)
	e.Exec(db, `GRANT INSERT, SELECT ON hits TO `+pgx.Identifier{owner}.Sanitize())
	id, err := c.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", Owner: owner, SQL: "INSERT INTO hits VALUES (1)", MaxAttempts: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	diesAfterNodeCommit(t, e, id)
	e.Exec("postgres", "REVOKE "+pgx.Identifier{owner}.Sanitize()+" FROM "+pgx.Identifier{sub}.Sanitize())
	e.Worker(engine.Config{})
	job := e.Wait(id, 30*time.Second)
	var n int
	if err := e.Pool(db).QueryRow(ctx, `SELECT count(*) FROM hits`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if d := detail(t, e, id); n != 1 || job.State != deckhandtype.JobFinished || len(d.Attempts) != 1 {
		t.Fatalf("job %s, effect %d times: %s; want finished, once, its one attempt recovered", job.State, n, explain(d))
	}
}
