package move_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
)

// A move owned by the superuser, its table named on a search_path that lists public (where a
// low-privilege role planted look-alikes of pg_catalog's functions and operators) before
// pg_catalog: the name is resolved, the table read, created, copied and switched, and the
// replication scaffolding and the source table removed, without calling any of them.
func TestMoveUnderTrojans(t *testing.T) {
	t.Parallel()
	e := newMoveEnv(t)
	intruder := fmt.Sprintf("intruder_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if err := e.NodeCluster.CreateRole(ctx, intruder, "LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, db := range []string{e.src, e.dst} {
			_ = e.NodeCluster.Exec(context.Background(), db, "DROP OWNED BY "+pgx.Identifier{intruder}.Sanitize())
		}
		_ = e.NodeCluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{intruder}.Sanitize())
	})
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
	}
	e.WorkerWith([]engine.Feature{moveKind(e.Env, false)})

	job := e.moveJob()
	job.SearchPath = "public, app, pg_catalog"
	job.Tasks[0].Payload = testenv.Payload(t, move.MovePayload{Table: "orders", To: "dst", SourceConninfo: e.NodeCluster.DSN(e.src, "postgres")})
	id := e.Submit(job)
	if got := e.Wait(id, time.Minute); got.State != deckhandtype.JobFinished {
		d, _ := e.Client.Job(ctx, id)
		t.Fatalf("move %s: %+v", got.State, d.Tasks[0].LastError)
	}
	clitest.Run(t, e.DSN, "cleanup", "run", "--wait", "20s")
	for _, r := range e.Records(id) {
		if r.State != deckhandtype.CleanupRemoved && r.State != deckhandtype.CleanupForgotten {
			t.Errorf("record %s %s.%s: %s %v", r.Type, r.Location, r.Name, r.State, r.LastError)
		}
	}
	if e.TableExists(e.src, "app.orders") || !e.TableExists(e.dst, "app.orders") {
		t.Errorf("after the move: on the source %v, on the target %v", e.TableExists(e.src, "app.orders"), e.TableExists(e.dst, "app.orders"))
	}
	for _, db := range []string{e.src, e.dst} {
		testenv.NoTrojanRan(t, e.NodeCluster, db, intruder)
	}
}

// A low-privilege role's table, moved by the superuser: its column's type is the role's own
// domain, whose CHECK calls the role's function, on both servers. Copying the rows into the
// target, and applying changes there, would run that function as the superuser. The move is
// refused before anything is copied, and the role's code never runs.
func TestMoveRefusesToRunAnotherRolesDomainCheck(t *testing.T) {
	t.Parallel()
	e := newMoveEnv(t)
	intruder := fmt.Sprintf("intruder_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if err := e.NodeCluster.CreateRole(ctx, intruder, "LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, db := range []string{e.src, e.dst} {
			_ = e.NodeCluster.Exec(context.Background(), db, "DROP OWNED BY "+pgx.Identifier{intruder}.Sanitize())
		}
		_ = e.NodeCluster.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{intruder}.Sanitize())
	})
	for _, db := range []string{e.src, e.dst} {
		testenv.PlantTrojans(t, e.NodeCluster, db, intruder)
		conn := e.NodeConn(db, intruder)
		if _, err := conn.Exec(ctx, `
			CREATE FUNCTION public.note_ok(text) RETURNS boolean LANGUAGE plpgsql AS $f$
			BEGIN PERFORM public.trojan(); RETURN true; END $f$;
			CREATE DOMAIN public.note AS text CHECK (public.note_ok(VALUE))`); err != nil {
			t.Fatal(err)
		}
	}
	conn := e.NodeConn(e.src, intruder)
	if _, err := conn.Exec(ctx, `CREATE TABLE public.notes (id bigint PRIMARY KEY, body public.note);
		INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, 100) g;
		SELECT pg_catalog.setval('public.trojan_hits', 1, false)`); err != nil {
		t.Fatal(err)
	}
	e.WorkerWith([]engine.Feature{moveKind(e.Env, false)})

	job := e.moveJob()
	job.Tasks[0].Payload = testenv.Payload(t, move.MovePayload{Table: "public.notes", To: "dst", SourceConninfo: e.NodeCluster.DSN(e.src, "postgres")})
	id := e.Submit(job)
	got := e.Wait(id, time.Minute)
	d, _ := e.Client.Job(ctx, id)
	if got.State != deckhandtype.JobFailed || d.Tasks[0].LastError == nil || !strings.Contains(d.Tasks[0].LastError.Message, "public.note") {
		t.Errorf("move %s (%+v): want it refused for the domain public.note", got.State, d.Tasks[0].LastError)
	}
	clitest.Run(t, e.DSN, "cleanup", "run", "--wait", "20s")
	for _, db := range []string{e.src, e.dst} {
		testenv.NoTrojanRan(t, e.NodeCluster, db, intruder)
	}

	// A domain of the owner's own, whose CHECK calls PostgreSQL's operators, moves.
	for _, db := range []string{e.src, e.dst} {
		e.NodeExec(db, `CREATE DOMAIN public.amount AS numeric CHECK (VALUE >= 0)`)
	}
	e.NodeExec(e.src, `CREATE TABLE public.payments (id bigint PRIMARY KEY, amount public.amount);
		INSERT INTO public.payments SELECT g, g FROM generate_series(1, 100) g`)
	job.Tasks[0].Payload = testenv.Payload(t, move.MovePayload{Table: "public.payments", To: "dst", SourceConninfo: e.NodeCluster.DSN(e.src, "postgres")})
	id = e.Submit(job)
	if got := e.Wait(id, time.Minute); got.State != deckhandtype.JobFinished {
		d, _ := e.Client.Job(ctx, id)
		t.Fatalf("move of public.payments %s: %+v", got.State, d.Tasks[0].LastError)
	}
}
