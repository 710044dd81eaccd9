package engine_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// catalogTrojans match calls of the catalog's own statements better than pg_catalog's
// functions do, whatever the search_path: nextval(text) takes the claim's
// nextval('deckhand.attempt_token_seq'), whose argument is an untyped literal.
const catalogTrojans = `
CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trojan(); RETURN pg_catalog.nextval($1::pg_catalog.regclass); END $f$;`

// A role that may create objects in the catalog database's public schema (any role, in a
// database created before PostgreSQL 15 or granted so) plants look-alikes of pg_catalog's
// functions there. The statements workers, the leader and every client send to the catalog
// must not call them: run as a worker, or as an admin, any of them is the intruder's
// way to every table of the catalog, and from there to every node.
func TestAttackTrojansInCatalogSessions(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	mallory, asMallory := e.Submitter("mallory")
	testenv.PlantTrojans(t, e.Cluster, e.DB, mallory)
	conn := pgtest.Connect(t, e.RoleDSN(mallory))
	if _, err := conn.Exec(ctx, catalogTrojans); err != nil {
		t.Fatal(err)
	}
	e.Exec(e.DB, `GRANT USAGE ON SCHEMA public TO PUBLIC`)
	e.Worker(engine.Config{})
	// A submitter's job and an admin's, submitted, run, listed and waited for.
	own, err := asMallory.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}})
	if err != nil {
		t.Fatal(err)
	}
	admins := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: "SELECT 1"}, {Name: "b", Node: "n1", SQL: "SELECT 2", DependsOn: []string{"a"}}}})
	for _, id := range []int64{own, admins} {
		if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
			t.Fatalf("job %d: %s", id, job.State)
		}
	}
	if _, err := e.Client.Jobs(ctx, deckhandtype.JobFilter{}); err != nil {
		t.Fatal(err)
	}
	testenv.NoTrojanRan(t, e.Cluster, e.DB, mallory)

	// What a client's submission captures is still the search_path its role logs in with.
	carol := e.Role("carol")
	e.Exec("postgres", `GRANT deckhand_submitter TO `+pgx.Identifier{carol}.Sanitize()+`;
		ALTER ROLE `+pgx.Identifier{carol}.Sanitize()+` SET search_path = shop, public`)
	asCarol, err := engine.Open(ctx, e.RoleDSN(carol))
	if err != nil {
		t.Fatal(err)
	}
	defer asCarol.Close()
	id, err := asCarol.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Kind: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	var path string
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT search_path FROM deckhand.job WHERE id = $1`, id).Scan(&path); err != nil || path != "shop, public" {
		t.Errorf("the job's search_path is %q (%v), want the role's: shop, public", path, err)
	}
}
