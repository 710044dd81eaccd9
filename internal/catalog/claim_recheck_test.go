package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// A claim reads the runnable tasks in a snapshot taken when its statement starts and locks
// them after: a task claimed, cancelled or paused by a transaction that commits in between is
// locked in its new state. The claim must take only tasks still runnable then. Otherwise a
// task ran twice at once; a cancelled part of an export ran and was counted cancelled twice,
// ending its job while the coordinator still ran; and a paused one ran and counted down its
// pausing job, which was then paused while it ran.
//
// Claimers take a group's tasks two at a time while each job of them is cancelled or paused
// part-way; a trigger records every attempt started (a new attempt token) on a task that was
// not runnable. The race is timing-dependent: each round gives it one chance, and the test runs
// rounds for a few seconds (without the check, the first illegal claim came within 18 rounds
// in each of 8 runs).
func TestClaimTakesOnlyTasksStillRunnable(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`CREATE TABLE public.illegal_claim (task_id bigint, old_state text)`)
	exec(`CREATE FUNCTION public.record_illegal_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.illegal_claim VALUES (NEW.id, OLD.state); RETURN NEW; END $$`)
	exec(`CREATE TRIGGER zz_illegal_claim AFTER UPDATE ON deckhand.task FOR EACH ROW
		WHEN (NEW.attempt_token IS DISTINCT FROM OLD.attempt_token AND OLD.state <> 'runnable') EXECUTE FUNCTION public.record_illegal_claim()`)
	exec(`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES
		('grp-a', 'host=/nonexistent', 'grp', 'primary', 100000), ('grp-b', 'host=/nonexistent', 'grp', 'primary', 100000)`)
	workers := []int64{catalogtest.Worker(ctx, t, cat.Pool, nil), catalogtest.Worker(ctx, t, cat.Pool, nil)}

	deadline := time.Now().Add(4 * time.Second)
	rounds := 0
	for ; time.Now().Before(deadline); rounds++ {
		var job int64
		err := cat.Pool.QueryRow(ctx, `
			WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ('parts', 'sql', 40) RETURNING id),
			     t AS (INSERT INTO deckhand.task (job_id, name, kind, node_group, owner, sql, max_attempts, timeout, state)
			           SELECT j.id, 'part-' || g, 'sql', 'grp', 'app', 'SELECT 1', 3, '1 hour', 'runnable'
			           FROM j, generate_series(1, 40) g)
			SELECT id FROM j`).Scan(&job)
		if err != nil {
			t.Fatal(err)
		}
		roundCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, len(workers))
		for _, w := range workers {
			wg.Add(1)
			go func(w int64) {
				defer wg.Done()
				for roundCtx.Err() == nil {
					if _, err := cat.Claim(roundCtx, w, 2); err != nil && roundCtx.Err() == nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		time.Sleep(time.Duration(1+rounds%4) * time.Millisecond)
		if rounds%2 == 0 {
			_, err = cat.CancelJob(ctx, job)
		} else {
			_, err = cat.PauseJob(ctx, job, false)
		}
		time.Sleep(2 * time.Millisecond)
		stop()
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		if err != nil {
			t.Fatalf("round %d: %v", rounds, err)
		}
		var illegal []string
		rows, _ := cat.Pool.Query(ctx, `SELECT task_id, old_state FROM public.illegal_claim ORDER BY task_id`)
		for rows.Next() {
			var id int64
			var state string
			if err := rows.Scan(&id, &state); err != nil {
				t.Fatal(err)
			}
			illegal = append(illegal, fmt.Sprintf("task %d from %s", id, state))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(illegal) > 0 {
			t.Fatalf("round %d: claims took tasks that were no longer runnable: %v", rounds, illegal)
		}
	}
	t.Logf("%d rounds, no task claimed unless runnable", rounds)
}
