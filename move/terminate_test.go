package move_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A server may serve several catalogs, and task ids (and attempt tokens) are numbered per
// catalog: another catalog's task of the same id, run as the same owner on the move's node,
// has backends named "deckhand task ID/TOKEN" too. A move's attempt ends the backends of its
// own task's earlier attempts, the ones its catalog records, and no other: here the other
// catalog's attempt runs on both nodes while the move does, and must survive it.
func TestMoveEndsOnlyItsOwnEarlierAttempts(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(1, "app")})
	task := mustTask(t, e, id)
	// The session another catalog's worker opens for an attempt of its task of the same id
	// (nodeconn.DedicatedSession: logged in as the owner, named after the task and its token).
	other := fmt.Sprintf("deckhand task %d/%d", task, 1<<40)
	for _, db := range []string{e.src, e.dst} {
		conn := e.NodeConn(db, e.owner)
		if _, err := conn.Exec(ctx, `SELECT pg_catalog.set_config('application_name', $1, false)`, other); err != nil {
			t.Fatal(err)
		}
		defer func() {
			var one int
			if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
				t.Errorf("the move terminated a session of another task on %s: %v", db, err)
			}
		}()
	}
	e.worker(move.Mover{})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
}

// A dead attempt's backend that ran a parallel query (the cut-over's counts, a copy's query)
// has parallel workers, which carry its application_name too and end with it. Terminating
// the backend ends them, and the new attempt goes on: it does not count a worker that ended
// with its leader, or a backend that ended on its own meanwhile, as one still running (the
// attempt failed, burning an attempt, with "backend(s) of an earlier attempt still run").
func TestMoveEndsAnEarlierAttemptsParallelQuery(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	e.NodeExec(e.src, `CREATE TABLE public.big AS SELECT g FROM generate_series(1, 200000) g`)
	e.NodeExec(e.src, `ALTER TABLE public.big SET (parallel_workers = 2)`)
	e.NodeExec(e.src, `CREATE FUNCTION public.slow(int) RETURNS boolean LANGUAGE plpgsql PARALLEL SAFE
		AS $$BEGIN PERFORM pg_sleep(0.01); RETURN false; END$$`)
	e.NodeExec(e.src, `GRANT SELECT ON public.big TO `+e.ownerIdent())
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(2, "app")})
	task := mustTask(t, e, id)
	leftover := make(chan error, 1)
	first := true
	e.worker(move.Mover{AfterStep: func(actx context.Context, step string) error {
		if step != move.StepStructure || !first {
			return nil
		}
		first = false
		// What a dead attempt leaves: a backend of the attempt, as the owner, running a
		// parallel query.
		attempts, err := e.Client.Catalog().Attempts(actx, id, 0, 0)
		if err != nil || len(attempts) != 1 {
			t.Errorf("attempts: %v %v", attempts, err)
			return err
		}
		conn := e.NodeConn(e.src, e.owner)
		if _, err := conn.Exec(actx, `SELECT pg_catalog.set_config('application_name', $1, false),
			set_config('max_parallel_workers_per_gather', '2', false), set_config('parallel_setup_cost', '0', false),
			set_config('parallel_tuple_cost', '0', false), set_config('min_parallel_table_scan_size', '0', false)`,
			fmt.Sprintf("deckhand task %d/%d", task, attempts[0].Token)); err != nil {
			t.Error(err)
			return err
		}
		go func() {
			_, err := conn.Exec(context.Background(), `SELECT count(*) FROM public.big WHERE public.slow(g)`)
			leftover <- err
		}()
		probe := e.NodeConn(e.src, pgcluster.Superuser)
		defer probe.Close(actx)
		for deadline := time.Now().Add(30 * time.Second); ; {
			var workers int
			if err := probe.QueryRow(actx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'parallel worker'
				AND application_name = $1`, fmt.Sprintf("deckhand task %d/%d", task, attempts[0].Token)).Scan(&workers); err != nil {
				return err
			}
			if workers > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the leftover query never ran in parallel")
				return errors.New("no parallel query")
			}
			time.Sleep(20 * time.Millisecond)
		}
		return errors.New("injected failure, a backend left behind")
	}})
	job := e.Wait(id, 2*time.Minute)
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
	select {
	case err := <-leftover:
		if err == nil {
			t.Error("the earlier attempt's query was not terminated")
		}
	case <-time.After(10 * time.Second):
		probe := e.NodeConn(e.src, pgcluster.Superuser)
		rows, _ := probe.Query(ctx, `SELECT pid::text || ' ' || backend_type || ' ' || application_name || ' ' || usename FROM pg_stat_activity WHERE usename = $1`, e.owner)
		left, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		at, _ := e.Client.Catalog().Attempts(ctx, id, 0, 0)
		t.Errorf("the earlier attempt's query still runs: %v %+v", left, at)
	}
}
