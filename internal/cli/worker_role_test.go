package cli_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// serve and cleanup run do a worker's writes: a catalog login without deckhand_worker is told
// so in one line, naming the grant, rather than with PostgreSQL's "permission denied for table".
func TestWorkerCommandsNeedTheWorkerRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	submitter, _ := e.Submitter("notworker")
	as := func(args ...string) result {
		return deckhand(t, "", append([]string{"--catalog", e.RoleDSN(submitter)}, args...)...)
	}
	grant := "GRANT deckhand_worker TO " + pgx.Identifier{submitter}.Sanitize()
	wantUsage(t, as("serve", "--concurrency", "1"), submitter+" may not run a worker", grant)
	wantUsage(t, as("cleanup", "run"), submitter+" may not run the cleaner", grant)

	// With the role, cleanup run does its pass.
	e.Exec("postgres", grant)
	want(t, as("cleanup", "run", "--wait", "0s"), 0)
	want(t, e.run("cleanup", "run", "--wait", "0s"), 0) // the catalog's owner (a superuser here)
}

// A login that holds table privileges on the catalog by mistake (GRANT ALL ON ALL TABLES IN
// SCHEMA deckhand) is still no worker: every table's guard refuses its writes, so serve and
// cleanup run refuse it as they refuse any login without deckhand_worker.
func TestTablePrivilegesGivenByMistakeMakeNoWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	submitter, _ := e.Submitter("granted")
	e.Exec(e.DB, `GRANT ALL ON ALL TABLES IN SCHEMA deckhand TO `+pgx.Identifier{submitter}.Sanitize())
	as := func(args ...string) result {
		return deckhand(t, "", append([]string{"--catalog", e.RoleDSN(submitter)}, args...)...)
	}
	grant := "GRANT deckhand_worker TO " + pgx.Identifier{submitter}.Sanitize()
	wantUsage(t, as("serve", "--concurrency", "1"), submitter+" may not run a worker", grant)
	wantUsage(t, as("cleanup", "run", "--wait", "0s"), submitter+" may not run the cleaner", grant)
}
