package cleanup_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The cleaner is a leader service.
var _ engine.Service = (*cleanup.Cleaner)(nil)

var ctx = context.Background()

// env is a catalog with nodes on the shared cluster, reached through the fault proxy. Its
// client submits the kinds an opRunner's worker runs.
type env struct{ *testenv.Proxied }

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{testenv.NewProxied(t, pgtest.Shared(t), drop.Feature(), move.Feature(), opFeature(nil))}
}

// run runs a deckhand command against the env's catalog and fails the test unless it succeeds.
func (e *env) run(args ...string) string {
	e.T.Helper()
	return clitest.Run(e.T, e.DSN, args...)
}

// deckhand runs a deckhand command against the env's catalog.
func (e *env) deckhand(args ...string) (code int, stdout, stderr string) {
	e.T.Helper()
	return clitest.Deckhand(e.T, e.DSN, args...)
}

// kindOp is a test-only task kind whose body each test writes: it begins an operation for its
// attempt and hands it to the body.
const kindOp = "cleanuptest_op"

// opFeature runs kindOp tasks with ex (nil for a client, which only submits them).
func opFeature(ex engine.Executor) engine.Feature { return testenv.Kind(kindOp, false, ex) }

type opBody func(ctx context.Context, op *cleanup.Operation) error

// opRunner is a worker whose cleanuptest_op tasks run bodies registered by key.
type opRunner struct {
	e       *env
	cleaner *cleanup.Cleaner
	mu      sync.Mutex
	bodies  map[string]opBody
}

func (e *env) opRunner(services ...*cleanup.Cleaner) *opRunner {
	r := &opRunner{e: e, cleaner: e.Cleaner(), bodies: map[string]opBody{}}
	op := engine.ExecutorFunc(func(ctx context.Context, t *deckhandtype.ClaimedTask) error {
		var p struct{ Key string }
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return taskerr.Permanent(err)
		}
		r.mu.Lock()
		body := r.bodies[p.Key]
		r.mu.Unlock()
		op, err := r.cleaner.Begin(ctx, t, "test operation "+p.Key)
		if err != nil {
			return err
		}
		return body(ctx, op)
	})
	var svcs []engine.Service
	for _, s := range services {
		svcs = append(svcs, s)
	}
	e.WorkerWith([]engine.Feature{drop.Feature(), move.Feature(), opFeature(op)}, svcs...)
	return r
}

// start submits a job whose one task runs body, once.
func (r *opRunner) start(body opBody) int64 {
	r.mu.Lock()
	key := strconv.Itoa(len(r.bodies))
	r.bodies[key] = body
	r.mu.Unlock()
	return r.e.Submit(&spec.Job{Tasks: []spec.Task{{Name: "op", Kind: kindOp, MaxAttempts: 1,
		Payload: testenv.Payload(r.e.T, map[string]string{"key": key})}}})
}

// listJSON runs `deckhand cleanup list -o json` with args and decodes what it printed.
func (e *env) listJSON(args ...string) []deckhandtype.CleanupRecord {
	e.T.Helper()
	code, out, errOut := e.deckhand(append([]string{"cleanup", "list", "-o", "json"}, args...)...)
	if code != 0 {
		e.T.Fatalf("cleanup list: exit %d: %s", code, errOut)
	}
	var recs []deckhandtype.CleanupRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		e.T.Fatalf("cleanup list -o json: %v\n%s", err, out)
	}
	return recs
}
