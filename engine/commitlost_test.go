package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// The node commits a task's transaction, and the connection breaks before the answer comes
// back; the node then stays out of reach for a while (crash recovery, a network that takes
// its time), so that the worker cannot ask it at once what became of the commit. The task
// must not run again as if the commit had failed: the node is asked again until it answers,
// and the task is done once, with its effect on the node once.
func TestCommitWhoseAnswerIsLostIsNotRunAgain(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	id := submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	// The node will not say what became of the transaction for a while.
	answer := xactStatusUnanswered(e)
	e.Worker(engine.Config{Backoff: quickAsking})
	loseCommitAnswer(t, e, db, letGo)
	deadline := time.Now().Add(20 * time.Second)
	for e.Proxy.Hits("status") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never asked the node about the commit: %d hits, effect %d times: %s", e.Proxy.Hits("status"), hitCount(t, e, db), explain(detail(t, e.Env, id)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	answer()
	wantFinishedOnce(t, e, db, id, e.Wait(id, 30*time.Second))
	if d := detail(t, e.Env, id); d.Tasks[0].Attempts != 1 {
		t.Errorf("attempts: %s; want one", explain(d))
	}
}

// The same lost answer, and the worker is stopped while the node still cannot say what became
// of the commit: the worker records nothing for the attempt (neither failed, which would run
// it again, nor done) and names it when it exits; the leader's rescue asks the node once it
// answers and records the task done, without running it again.
func TestCommitOutcomeUnknownAtShutdownIsLeftToTheRescue(t *testing.T) {
	e := testenv.NewProxied(t, pgtest.Shared(t))
	db := nodeWithHits(e)
	id := submit(t, e.Env, oneHitJob())
	letGo := holdCommitAnswers(e)
	answer := xactStatusUnanswered(e)
	cat, err := catalog.Open(ctx, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{LeaseTTL: 2 * time.Second, ShutdownGrace: 200 * time.Millisecond,
		ShutdownRecordTimeout: time.Second, Logger: testenv.Quiet()})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	loseCommitAnswer(t, e, db, letGo)
	waitAsked(t, e, 1)
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, engine.ErrNotRecorded) {
			t.Errorf("Run returned %v, want ErrNotRecorded naming the attempt", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop")
	}
	if d := detail(t, e.Env, id); d.Tasks[0].State != deckhandtype.TaskRunning || len(d.Attempts) != 1 {
		t.Fatalf("after the stop: task %s, attempts %s; want it running, for the rescue", d.Tasks[0].State, explain(d))
	}
	answer()
	e.Worker(engine.Config{})
	job := e.Wait(id, 30*time.Second)
	d := detail(t, e.Env, id)
	if n := hitCount(t, e, db); n != 1 || job.State != deckhandtype.JobFinished || len(d.Attempts) != 1 ||
		d.Attempts[0].Message == nil || !strings.HasPrefix(*d.Attempts[0].Message, "recovered") {
		t.Fatalf("job %s, the task took effect %d times: %s; want finished once, its attempt recovered", job.State, n, explain(d))
	}
}
