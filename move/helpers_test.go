package move_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// moveEnv is a catalog with a source and a target node on the logical cluster (two databases,
// reached by workers through the fault proxy) and a table with rows on the source.
type moveEnv struct {
	*testenv.Proxied
	src, dst string // databases
}

const movedTable = "app.orders"

func newMoveEnv(t *testing.T) *moveEnv {
	t.Helper()
	e := &moveEnv{Proxied: testenv.NewProxied(t, testenv.LogicalCluster(t), move.Feature())}
	e.src = e.Node("src")
	e.dst = e.Node("dst")
	e.NodeExec(e.src, `CREATE SCHEMA app;
		CREATE TABLE app.orders (id bigint PRIMARY KEY, customer text NOT NULL, total numeric(10,2), note text);
		INSERT INTO app.orders SELECT g, 'c' || g % 17, g * 1.5, repeat('x', g % 50) FROM generate_series(1, 2000) g`)
	return e
}

func (e *moveEnv) moveJob() *spec.Job {
	return &spec.Job{Description: "move orders", Tasks: []spec.Task{{
		Name: "move", Kind: move.KindMoveTable, Node: "src", MaxAttempts: 1, Timeout: spec.Duration(time.Minute),
		Payload: testenv.Payload(e.T, move.MovePayload{Table: movedTable, To: "dst",
			// The target server reaches the source directly: the proxy is the workers'.
			SourceConninfo: e.NodeCluster.DSN(e.src, pgcluster.Superuser)}),
	}}}
}

func (e *moveEnv) snapshots() (src, dst []string) {
	return e.Snapshot(e.src, movedTable), e.Snapshot(e.dst, movedTable)
}

// moved is the state a successful move leaves: the source without the table, the target with
// the schema and the table holding the source's rows.
func (e *moveEnv) moved(preSrc []string) (src, dst []string) {
	for _, s := range preSrc {
		if strings.Contains(s, "app.orders") {
			dst = append(dst, s)
		} else {
			src = append(src, s)
			dst = append(dst, s)
		}
	}
	return src, dst
}

// checkState compares the nodes with what they should hold, and the job's records with their
// policies: a record is removed if its policy removes it for that outcome, else forgotten.
func (e *moveEnv) checkState(jobID int64, wantSrc, wantDst []string, succeeded bool) {
	e.T.Helper()
	src, dst := e.snapshots()
	if d := testenv.Diff(wantSrc, src); d != "" {
		e.T.Errorf("source node differs from the expected state:\n%s", d)
	}
	if d := testenv.Diff(wantDst, dst); d != "" {
		e.T.Errorf("target node differs from the expected state:\n%s", d)
	}
	recs := e.Records(jobID)
	if len(recs) == 0 {
		e.T.Errorf("job %d registered no cleanup record", jobID)
	}
	for _, r := range recs {
		want := deckhandtype.CleanupRemoved
		if (succeeded && r.Policy == deckhandtype.PolicyOnFailure) || (!succeeded && r.Policy == deckhandtype.PolicyDeferredOnSuccess) {
			want = deckhandtype.CleanupForgotten
		}
		if r.State != want {
			e.T.Errorf("record %d (%s %s, %s) is %s, want %s (last error: %s)", r.ID, r.Type, r.Resource().Display(), r.Policy, r.State, want, deref(r.LastError))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// cleanupRun runs `deckhand cleanup run`, checks it succeeded and returns what it printed.
func (e *moveEnv) cleanupRun() string {
	e.T.Helper()
	return clitest.Run(e.T, e.DSN, "cleanup", "run", "--wait", "20s")
}

// moveKind runs move_table tasks with a cleaner of e's catalog that has the test intervals;
// with leaveToCleaner the worker removes nothing itself.
func moveKind(e *testenv.Env, leaveToCleaner bool) engine.Feature {
	return testenv.Kind(move.KindMoveTable, true, move.MoveTable{Cleaner: e.Cleaner(), LeaveToCleaner: leaveToCleaner})
}
