package testenv

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Quiet is a logger for in-process workers and cleaners, whose chatter would drown the test
// output. With DECKHAND_TEST_LOG set it logs everything to standard error.
func Quiet() *slog.Logger {
	if os.Getenv("DECKHAND_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// WorkerWith runs an in-process worker (see Worker) that runs only the kinds of features and,
// when it leads, only services: no cleaner, so that the test decides when cleanup happens.
// Retryable failures are retried after 50ms, doubling up to 200ms.
func (e *Env) WorkerWith(features []engine.Feature, services ...engine.Service) *engine.Worker {
	e.T.Helper()
	w, _ := e.Worker(engine.Config{
		Concurrency:    8,
		ShutdownGrace:  time.Second,
		Features:       features,
		NoCleaner:      true,
		LeaderServices: services,
		Logger:         Quiet(),
		Backoff:        deckhandtype.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	})
	return w
}

// Kind is a feature with one task kind whose tasks ex runs, for a worker whose executor the
// test writes or configures itself. Any payload is accepted.
func Kind(name string, needsNode bool, ex engine.Executor) engine.Feature {
	return engine.Feature{Name: name, Kinds: []engine.Kind{{Name: name, NeedsNode: needsNode,
		Validate: func(json.RawMessage) error { return nil }, New: func(engine.Deps) engine.Executor { return ex }}}}
}

// Pools are node connection pools for executors and cleaners, closed when the test ends.
// They close in the background: after a proxy dropped a connection, pgx sends a cancel request
// through the proxy, which keeps that request open until pgx gives up (15s), and Close would
// wait for it.
func Pools(t testing.TB) *nodeconn.Pools {
	p := nodeconn.NewPools(8)
	t.Cleanup(func() { go p.Close() })
	return p
}

// Cleaner is a cleaner of the env's catalog that passes every 200ms and probes resources in
// use every 20ms, so that tests do not wait for the production intervals.
func (e *Env) Cleaner() *cleanup.Cleaner {
	c := cleanup.New(e.Client.Catalog(), Pools(e.T))
	c.Logger = Quiet()
	c.Interval = 200 * time.Millisecond
	c.ProbeInterval = 20 * time.Millisecond
	return c
}

// Submit submits job as the superuser and returns its id; a refusal fails the test.
func (e *Env) Submit(job *spec.Job) int64 {
	e.T.Helper()
	id, err := e.Client.Submit(context.Background(), job)
	if err != nil {
		e.T.Fatal(err)
	}
	return id
}

// Payload is v as a task payload.
func Payload(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Records lists the cleanup records of a job.
func (e *Env) Records(jobID int64) []deckhandtype.CleanupRecord {
	e.T.Helper()
	recs, err := e.Client.CleanupRecords(context.Background(), deckhandtype.CleanupFilter{JobID: jobID})
	if err != nil {
		e.T.Fatal(err)
	}
	return recs
}

// ForgeSubmitter makes a job look submitted by submitter, as only someone who can bypass the
// catalog's protections could (the schema's owner disabling the trigger that keeps a job's
// submitter fixed): for tests that executors re-check the submitter on the node.
func (e *Env) ForgeSubmitter(jobID int64, submitter string) {
	e.T.Helper()
	e.Exec(e.DB, `ALTER TABLE deckhand.job DISABLE TRIGGER job_identity`)
	e.Exec(e.DB, `UPDATE deckhand.job SET submitted_by = $1 WHERE id = $2`, submitter, jobID)
	e.Exec(e.DB, `ALTER TABLE deckhand.job ENABLE TRIGGER job_identity`)
}

// FailedWith waits for a job of one task to end and checks that it failed with an error
// containing every fragment.
func (e *Env) FailedWith(id int64, fragments ...string) {
	e.T.Helper()
	job := e.Wait(id, time.Minute)
	d, err := e.Client.Job(context.Background(), id)
	if err != nil {
		e.T.Fatal(err)
	}
	if job.State != deckhandtype.JobFailed || d.Tasks[0].LastError == nil {
		e.T.Fatalf("job %s, task error %+v: want refused", job.State, d.Tasks[0].LastError)
	}
	for _, f := range fragments {
		if !strings.Contains(d.Tasks[0].LastError.Message, f) {
			e.T.Errorf("task error %q does not mention %q", d.Tasks[0].LastError.Message, f)
		}
	}
}
