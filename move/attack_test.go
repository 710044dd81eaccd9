package move_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// intruder creates a login role with no privilege, dropped (with what it owns) when the test ends.
func (e *moveEnv) intruder() string {
	e.T.Helper()
	name := fmt.Sprintf("intruder_%d_%d", os.Getpid(), roleSeq.Add(1))
	if err := pgtest.CreateLoginRole(ctx, e.NodeCluster, name, ""); err != nil { // the nodes ask for passwords
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		for _, db := range []string{e.src, e.dst} {
			_ = e.NodeCluster.Exec(context.Background(), db, "DROP OWNED BY "+pgx.Identifier{name}.Sanitize())
		}
		_ = e.NodeCluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
	return name
}

// as runs SQL on database db as role.
func (e *moveEnv) as(role, db, sql string) {
	e.T.Helper()
	conn := e.NodeConn(db, role)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		e.T.Fatalf("as %s: %v", role, err)
	}
}

// A schema the owner shares with another role (USAGE and CREATE), which put a SECURITY
// DEFINER function in it. On the source the function runs as that role; the move recreates
// the schema's objects on the target as the owner (pg_dump --no-owner), so there the other
// role would call its own code as the owner. The move must refuse such a schema (or keep the
// function's owner); it must never hand the role's code the owner's rights.
func TestAttackMoveGivesAnotherRolesObjectsToTheOwner(t *testing.T) {
	e := newMoveEnv(t)
	intruder := e.intruder()
	in := pgx.Identifier{intruder}.Sanitize()
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY); INSERT INTO app.t VALUES (1);
		GRANT USAGE, CREATE ON SCHEMA app TO `+in)
	e.as(intruder, e.src, `CREATE FUNCTION app.whoami() RETURNS text LANGUAGE sql SECURITY DEFINER AS 'SELECT current_user::text'`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	t.Logf("move %s: %s", job.State, e.lastError(id))
	if !e.schemaExists(e.dst, "app") {
		return // refused: nothing of the intruder's runs anywhere as the owner
	}
	conn := e.NodeConn(e.dst, intruder)
	defer conn.Close(ctx)
	var who string
	err := conn.QueryRow(ctx, `SELECT app.whoami()`).Scan(&who)
	if err == nil && who == e.owner {
		t.Errorf("after the move, %s's SECURITY DEFINER function app.whoami runs as the owner %s on the target", intruder, e.owner)
	}
	var owner string
	if err := e.NodeConn(e.dst, pgcluster.Superuser).QueryRow(ctx,
		`SELECT proowner::regrole::text FROM pg_proc WHERE oid = 'app.whoami()'::regprocedure`).Scan(&owner); err == nil && owner != in {
		t.Errorf("app.whoami, %s's on the source, is %s's on the target", intruder, owner)
	}
}

// A low-privilege role's domain (public.note, on both nodes) whose CHECK calls the role's own
// function; the owner's table uses it. Copying the rows into the target, and applying changes
// there, runs that CHECK in the owner's session: the role's code would run as the owner. The
// move must refuse it before copying, and the role's code never runs on the target.
func TestAttackMoveRunsAnotherRolesDomainCheck(t *testing.T) {
	e := newMoveEnv(t)
	intruder := e.intruder()
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
		e.as(intruder, db, `
			CREATE FUNCTION public.note_ok(text) RETURNS boolean LANGUAGE plpgsql AS $f$
			BEGIN PERFORM public.trojan(); RETURN true; END $f$;
			CREATE DOMAIN public.note AS text CHECK (public.note_ok(VALUE))`)
	}
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.notes (id bigint PRIMARY KEY, body public.note);
		INSERT INTO app.notes SELECT g, 'n' || g FROM generate_series(1, 100) g`)
	e.as(intruder, e.src, `SELECT pg_catalog.setval('public.trojan_hits', 1, false)`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	msg := e.lastError(id)
	if job.State != deckhandtype.JobFailed || !strings.Contains(msg, "public.note") {
		t.Errorf("move %s (%s): want it refused for the domain public.note", job.State, msg)
	}
	for _, db := range []string{e.src, e.dst} {
		testenv.NoTrojanRan(t, e.NodeCluster, db, intruder)
	}
}

// A low-privilege role planted look-alikes of pg_catalog's functions and operators in public
// on both nodes, and the owner's own search_path lists public first: the move (plan, dump,
// structure, copy, catch-up, cut-over, removal of the source) calls none of them.
func TestAttackMoveUnderTrojans(t *testing.T) {
	e := newMoveEnv(t)
	intruder := e.intruder()
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
	}
	e.asOwner(e.src, appSchema)
	e.NodeExec("postgres", `ALTER ROLE `+e.ownerIdent()+` SET search_path = public, pg_catalog`)
	e.as(intruder, e.src, `SELECT pg_catalog.setval('public.trojan_hits', 1, false)`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move %s: %s", job.State, e.lastError(id))
	}
	e.cleanupRun()
	for _, db := range []string{e.src, e.dst} {
		testenv.NoTrojanRan(t, e.NodeCluster, db, intruder)
	}
	if e.schemaExists(e.src, "app") || !e.schemaExists(e.dst, "app") {
		t.Errorf("after the move: schema app on the source %v, on the target %v", e.schemaExists(e.src, "app"), e.schemaExists(e.dst, "app"))
	}
}

// A move job whose submitter was forged in the catalog (a role that is not a member of the
// owner on the nodes) is refused by the worker on the node, and changes nothing on either.
func TestAttackForgedMoveIsRefused(t *testing.T) {
	e := newMoveEnv(t)
	outsider := e.intruder()
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY); INSERT INTO app.t VALUES (1)`)
	preSrc, preDst := e.Snapshot(e.src, "app.t"), e.Snapshot(e.dst)
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	e.ForgeSubmitter(id, outsider)
	e.worker(move.Mover{})
	e.FailedWith(id, fmt.Sprintf("submitter %q is not a member of role %q", outsider, e.owner))
	if recs := e.Records(id); len(recs) != 0 {
		t.Errorf("the refused move registered resources: %+v", recs)
	}
	if d := testenv.Diff(preSrc, e.Snapshot(e.src, "app.t")); d != "" {
		t.Errorf("the refused move changed the source:\n%s", d)
	}
	if d := testenv.Diff(preDst, e.Snapshot(e.dst)); d != "" {
		t.Errorf("the refused move changed the target:\n%s", d)
	}
}

// Names as hostile as PostgreSQL allows: quotes, a dot, a backslash, unicode, mixed case and a
// name at the 63-byte limit, for the schema, a table, its columns and its sequence. The move
// quotes them everywhere (pg_dump's patterns, the publication, the copy, setval, the cut-over's
// refusing triggers), moves the rows, and the source refuses writes afterwards.
func TestAttackMoveQuotesHostileNames(t *testing.T) {
	e := newMoveEnv(t)
	schema := `Sch"em.a 'ü\`
	table := `T'a"b.` + strings.Repeat("x", 63-len(`T'a"b.`))
	s, tb := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema, table}.Sanitize()
	e.asOwner(e.src, `CREATE SCHEMA `+s+`;
		CREATE TABLE `+tb+` (`+pgx.Identifier{`i"d`}.Sanitize()+` bigserial PRIMARY KEY, `+pgx.Identifier{`v'al.`}.Sanitize()+` text);
		INSERT INTO `+tb+` (`+pgx.Identifier{`v'al.`}.Sanitize()+`) SELECT 'row ' || g FROM generate_series(1, 500) g`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: s, From: "g1", To: "g2"})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move %s: %s", job.State, e.lastError(id))
	}
	dst := e.NodeConn(e.dst, e.owner)
	var n, next int64
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM `+tb).Scan(&n); err != nil || n != 500 {
		t.Fatalf("rows on the target: %d, %v", n, err)
	}
	if err := dst.QueryRow(ctx, `INSERT INTO `+tb+` DEFAULT VALUES RETURNING `+pgx.Identifier{`i"d`}.Sanitize()).Scan(&next); err != nil || next <= 500 {
		t.Errorf("the target's sequence gave %d (%v): want it past the source's 500", next, err)
	}
	src := e.NodeConn(e.src, e.owner)
	_, err := src.Exec(ctx, `INSERT INTO `+tb+` DEFAULT VALUES`)
	// Refused by the moved table's trigger, or — once no query used it and the deferred drop
	// removed it — gone: either way the write fails, it never lands where nobody reads.
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "25006" && pgErr.Code != "42P01") {
		t.Errorf("a write to the source after the move: %v, want it refused (25006) or the table gone (42P01)", err)
	}
}

// A schema of the superuser in which a low-privilege role may create tables: the role's table
// has a CHECK constraint calling the role's function. Moved as the superuser, the structure
// keeps the table the role's, but copying its rows into the target (and applying changes)
// runs the CHECK in the superuser's session: the role's code would run as the superuser. The
// move is refused before any row is written, and the role's code never runs on the target.
func TestAttackMoveRunsAnotherRolesCheckAsTheSuperuser(t *testing.T) {
	e := newMoveEnv(t)
	intruder := e.intruder()
	in := pgx.Identifier{intruder}.Sanitize()
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
	}
	e.NodeExec(e.src, `CREATE SCHEMA shared; CREATE TABLE shared.base (id int PRIMARY KEY); GRANT USAGE, CREATE ON SCHEMA shared TO `+in)
	e.as(intruder, e.src, `
		CREATE FUNCTION shared.positive(int) RETURNS boolean LANGUAGE plpgsql AS $f$
		BEGIN PERFORM public.trojan(); RETURN $1 > 0; END $f$;
		CREATE TABLE shared.mine (id int PRIMARY KEY, v int CHECK (shared.positive(v)));
		INSERT INTO shared.mine SELECT g, g FROM generate_series(1, 10) g;
		SELECT pg_catalog.setval('public.trojan_hits', 1, false)`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "shared", From: "g1", To: "g2", Owner: pgcluster.Superuser})
	job := e.Wait(id, 2*time.Minute)
	msg := e.lastError(id)
	if job.State != deckhandtype.JobFailed || !strings.Contains(msg, "shared.positive") {
		t.Errorf("move %s (%s): want it refused for the function shared.positive", job.State, msg)
	}
	for _, db := range []string{e.src, e.dst} {
		testenv.NoTrojanRan(t, e.NodeCluster, db, intruder)
	}
}

// A low-privilege role's enum type (on both nodes), with a cast from text of its own whose
// function is the role's code; the owner's table has a column of that type. Catch-up applies
// the source's changes on the target with each value sent as text and cast to the column's
// type, which would call the role's cast function as the owner. The move must refuse it
// before anything runs, and the role's code never runs on the target.
func TestAttackMoveAppliesThroughAnotherRolesCast(t *testing.T) {
	e := newMoveEnv(t)
	intruder := e.intruder()
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
		e.as(intruder, db, `
			CREATE TYPE public.mood AS ENUM ('a', 'b');
			CREATE FUNCTION public.mood_from_text(text) RETURNS public.mood LANGUAGE plpgsql AS $f$
			BEGIN PERFORM public.trojan(); RETURN 'a'::public.mood; END $f$;
			CREATE CAST (text AS public.mood) WITH FUNCTION public.mood_from_text(text)`)
	}
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY, m public.mood); INSERT INTO app.t VALUES (1, 'a')`)
	e.as(intruder, e.src, `SELECT pg_catalog.setval('public.trojan_hits', 1, false)`)
	// A change after the copy's snapshot, for catch-up to apply.
	e.worker(move.Mover{AfterStep: func(ctx context.Context, step string) error {
		if step == move.StepCopy {
			e.asOwner(e.src, `INSERT INTO app.t VALUES (2, 'b')`)
		}
		return nil
	}})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	t.Logf("move %s: %s", job.State, e.lastError(id))
	testenv.NoTrojanRan(t, e.NodeCluster, e.dst, intruder)
}

// A submitter asks for a move of a schema that is not its owner's (another tenant's, which the
// owner may merely see in the catalogs). Such a move can never succeed, and must not mark the
// schema as being moved meanwhile: a mark held by a retrying (or paused) job would refuse
// every other move and rebalance of that schema. It fails at once, before marking anything.
func TestAttackMoveOfAnotherTenantsSchemaMarksNothing(t *testing.T) {
	e := newMoveEnv(t)
	e.NodeExec(e.src, `CREATE SCHEMA victim; CREATE TABLE victim.t (id int PRIMARY KEY); INSERT INTO victim.t VALUES (1);
		GRANT USAGE ON SCHEMA victim TO PUBLIC; GRANT SELECT ON victim.t TO PUBLIC`)
	task, err := move.Request{Schema: "victim", From: "g1", To: "g2", Owner: e.owner}.Task("move")
	if err != nil {
		t.Fatal(err)
	}
	task.MaxAttempts = 5
	id := e.Submit(jobOf(task))
	e.worker(move.Mover{})
	var d *engine.JobDetail
	// The job and its tasks are read apart: wait for the job to end (a move retried until its
	// attempts ran out would end too, with more than one).
	testenv.Eventually(t, time.Minute, func() bool {
		d, err = e.Client.Job(ctx, id)
		return err == nil && d.State.Terminal()
	}, "the move ends")
	t.Logf("move of victim by %s: %s, attempt %d: %s", e.owner, d.State, d.Tasks[0].Attempts, e.lastError(id))
	if d.Tasks[0].Attempts != 1 {
		t.Errorf("the move of another tenant's schema took %d attempts, want it refused at the first", d.Tasks[0].Attempts)
	}
	placements, moving := e.placementsNow()
	for _, p := range placements {
		if p.MovingJobID != nil && *p.MovingJobID == id {
			t.Errorf("job %d (%s, %s) of a role that does not own schema victim marks it as being moved", id, d.State, e.lastError(id))
		}
	}
	for _, m := range moving {
		if m.JobID == id {
			t.Errorf("job %d (%s, %s) of a role that does not own schema victim marks it as being moved", id, d.State, e.lastError(id))
		}
	}
	if len(placements) != 0 {
		t.Errorf("the refused move of victim placed something: %+v", placements)
	}
	if d.State != deckhandtype.JobFailed {
		t.Errorf("the move of another tenant's schema is %s (%s), want failed at once", d.State, e.lastError(id))
	}
	if _, err := e.Client.Cancel(ctx, id); err != nil && !strings.Contains(err.Error(), "ended") {
		t.Log(err)
	}
}

// A table whose row-security policies apply to the owner itself (FORCE ROW LEVEL SECURITY, as
// multi-tenant schemas do so that the application role is filtered too). The copy reads it, and
// the cut-over counts it, in the owner's sessions, where the policies hide rows: the target must
// not end with fewer rows than the source had and the source be dropped — the move refuses it,
// or carries every row.
func TestAttackMoveLosesNoRowHiddenByRowSecurity(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY, tenant int NOT NULL);
		INSERT INTO app.t SELECT g, g % 4 FROM generate_series(1, 100) g;
		ALTER TABLE app.t ENABLE ROW LEVEL SECURITY; ALTER TABLE app.t FORCE ROW LEVEL SECURITY;
		CREATE POLICY mine ON app.t USING (tenant = coalesce(nullif(current_setting('app.tenant', true), ''), '0')::int)`)
	e.worker(move.Mover{})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	t.Logf("move %s: %s", job.State, e.lastError(id))
	e.cleanupRun()
	count := func(db string) int64 {
		var n int64 = -1
		if e.schemaExists(db, "app") {
			conn := e.NodeConn(db, pgcluster.Superuser)
			defer conn.Close(ctx)
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM app.t`).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	if src, dst := count(e.src), count(e.dst); src != 100 && dst != 100 {
		t.Errorf("after the move (%s) app.t has %d rows on the source and %d on the target (-1: gone), want all 100 on one", job.State, src, dst)
	}
}
