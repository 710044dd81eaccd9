package move_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// failureSteps are the steps after which a failure is injected: every step that creates or
// changes something.
var failureSteps = []string{move.StepStructure, move.StepSlot, move.StepCopy, move.StepIndexes,
	move.StepCatchUp, move.StepCutOver, move.StepSwitch}

// failureModes are the failures TestMoveFailureAtEachStep injects: the first two are retried
// (the move goes on), the last is not (the move is cleaned up).
var failureModes = []string{"error-retried", "connections-dropped", "permanent-error"}

// fullMatrix tells the two step tests below to inject every failure after every step (35
// moves; DECKHAND_FULL_MATRIX=1, see docs/testing.md). Otherwise each injects one failure
// after each step, as quickFailure and quickKill say, so that every step is followed once by
// a move that goes on and once by one that does not, each mode of failure is injected at two
// steps or more, and the kills cover a restart and both resumed steps.
func fullMatrix() bool { return os.Getenv("DECKHAND_FULL_MATRIX") != "" }

var (
	quickFailure = map[string]string{move.StepStructure: "permanent-error", move.StepSlot: "error-retried",
		move.StepCopy: "connections-dropped", move.StepIndexes: "permanent-error", move.StepCatchUp: "permanent-error",
		move.StepCutOver: "error-retried", move.StepSwitch: "connections-dropped"}
	// quickKill is the attempts the killed worker's move has: 3 goes on, 1 leaves it failed.
	quickKill = map[string]int{move.StepStructure: 3, move.StepSlot: 1, move.StepCopy: 1, move.StepIndexes: 3,
		move.StepCatchUp: 3, move.StepCutOver: 1, move.StepSwitch: 1}
)

// modesAt are the failure modes injected after step.
func modesAt(step string) []string {
	if fullMatrix() {
		return failureModes
	}
	mode, ok := quickFailure[step]
	if !ok {
		panic("no failure chosen for step " + step)
	}
	return []string{mode}
}

// attemptsAfterKill are the attempts of the move whose worker is killed after step.
func attemptsAfterKill(step string) []int {
	if fullMatrix() {
		return []int{3, 1}
	}
	attempts, ok := quickKill[step]
	if !ok {
		panic("no attempts chosen for step " + step)
	}
	return []int{attempts}
}

// failureEnv is a move env holding appSchema, with the state of both nodes before any move.
type failureEnv struct {
	*moveEnv
	preSrc, preDst []string
	sums           map[string]string
}

func newFailureEnv(t *testing.T) *failureEnv {
	e := &failureEnv{moveEnv: newMoveEnv(t)}
	e.asOwner(e.src, appSchema)
	e.preSrc, e.preDst = e.Snapshot(e.src, appTables...), e.Snapshot(e.dst, appTables...)
	e.sums = e.checksums(e.src, appTables...)
	return e
}

func (e *failureEnv) submitMove(attempts int) int64 {
	e.T.Helper()
	task, err := move.Request{Schema: "app", From: "g1", To: "g2", Owner: e.owner}.Task("move")
	if err != nil {
		e.T.Fatal(err)
	}
	task.MaxAttempts = attempts
	id, err := e.Client.Submit(ctx, jobOf(task))
	if err != nil {
		e.T.Fatal(err)
	}
	return id
}

// asBefore checks that, after `deckhand cleanup run`, both nodes are exactly as before the move.
func (e *failureEnv) asBefore() {
	e.T.Helper()
	e.cleanupRun()
	if d := testenv.Diff(e.preSrc, e.Snapshot(e.src, appTables...)); d != "" {
		e.T.Errorf("the source is not as before the move:\n%s", d)
	}
	if d := testenv.Diff(e.preDst, e.Snapshot(e.dst, appTables...)); d != "" {
		e.T.Errorf("the target is not as before the move:\n%s", d)
	}
	conn := e.NodeConn(e.src, e.owner)
	if _, err := conn.Exec(ctx, `INSERT INTO app.notes VALUES (99999, 'still writable')`); err != nil {
		e.T.Errorf("the source refuses writes after a failed move: %v", err)
	}
}

// moved checks the state a completed move leaves, once `deckhand cleanup run` has dropped
// the source: the target has the source's rows, the source nothing, no scaffolding anywhere.
func (e *failureEnv) moved(id int64) {
	e.T.Helper()
	e.cleanupRun()
	got := e.checksums(e.dst, appTables...)
	for _, tbl := range appTables {
		if got[tbl] != e.sums[tbl] {
			e.T.Errorf("%s on the target differs from the source before the move", tbl)
		}
	}
	testenv.Eventually(e.T, 30*time.Second, func() bool { return !e.schemaExists(e.src, "app") }, "the source schema dropped")
	noReplicationLeft(e.T.(*testing.T), e.moveEnv)
	var scratch int
	if err := e.NodeConn(e.dst, pgcluster.Superuser).QueryRow(ctx,
		`SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'deckhand\_move\_%'`).Scan(&scratch); err != nil || scratch != 0 {
		e.T.Errorf("%d scratch schemas left on the target (%v)", scratch, err)
	}
	placements, err := e.Client.Catalog().Placements(ctx)
	if err != nil || len(placements) == 0 || placements[0].Group != "g2" {
		e.T.Errorf("placements after the move: %+v (%v)", placements, err)
	}
}

// A failure after any step — an error, or the nodes' connections dropped — is followed by a
// retry that completes the move; a permanent failure leaves, after `deckhand cleanup run`,
// both nodes exactly as before (after the switch, the move is complete whatever follows).
func TestMoveFailureAtEachStep(t *testing.T) {
	for _, step := range failureSteps {
		for _, mode := range modesAt(step) {
			t.Run(step+"/"+mode, func(t *testing.T) {
				t.Parallel()
				e := newFailureEnv(t)
				injected := 0
				m := move.Mover{LeaveToCleaner: mode == "permanent-error", AfterStep: func(_ context.Context, s string) error {
					if s != step || injected > 0 {
						return nil
					}
					injected++
					switch mode {
					case "connections-dropped":
						e.Proxy.DropAll()
						return nil
					case "permanent-error":
						return taskerr.Permanent(fmt.Errorf("injected failure after %s", s))
					}
					return fmt.Errorf("injected failure after %s", s)
				}}
				attempts := 3
				switch mode {
				case "permanent-error":
					attempts = 1
				case "connections-dropped":
					// Each retry may draw one more of the pool's dropped idle sessions (pgxpool
					// pings only those idle for over a second, and the test's backoff is 50ms).
					attempts = 8
				}
				id := e.submitMove(attempts)
				e.worker(m)
				job := e.Wait(id, 2*time.Minute)
				if injected == 0 {
					t.Fatalf("no failure was injected after %s (job %s: %s)", step, job.State, e.lastError(id))
				}
				switch {
				case mode != "permanent-error":
					if job.State != deckhandtype.JobFinished {
						t.Fatalf("job %s after a retry: %s", job.State, e.lastError(id))
					}
					e.moved(id)
				case step == move.StepSwitch:
					// Failing after the switch leaves a complete move.
					if job.State != deckhandtype.JobFailed {
						t.Fatalf("job %s, want failed by the injected error", job.State)
					}
					e.moved(id)
				default:
					if job.State != deckhandtype.JobFailed || !strings.Contains(e.lastError(id), "injected failure") {
						t.Fatalf("job %s: %s", job.State, e.lastError(id))
					}
					e.asBefore()
				}
			})
		}
	}
}

// A worker killed (kill -9) after any step: the task is rescued and a new attempt completes
// the move — resuming the catch-up with what the dead one made if it got past the copy and
// the indexes (the target's tables kept, no row copied twice, writes made meanwhile brought
// over), else after removing what the dead one left; with no attempt left, the job fails and
// `deckhand cleanup run` leaves both nodes exactly as before (after the switch: moved).
func TestMoveWorkerKilledAtEachStep(t *testing.T) {
	bin := testenv.FaultBinary(t)
	for _, step := range failureSteps {
		for _, attempts := range attemptsAfterKill(step) {
			t.Run(fmt.Sprintf("%s/attempts=%d", step, attempts), func(t *testing.T) {
				t.Parallel()
				e := newFailureEnv(t)
				id := e.submitMove(attempts)
				p := e.ServeBinary(bin, []string{"DECKHAND_FAULT=kill-after-move-step:" + step}, "--lease", "1s", "--concurrency", "1")
				done := make(chan error, 1)
				go func() { done <- p.Cmd.Wait() }()
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), "killed") {
						t.Fatalf("the faulty worker exited with %v, want killed after %s:\n%s", err, step, p.Output())
					}
				case <-time.After(60 * time.Second):
					d, _ := e.Client.Job(ctx, id)
					p.Cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // its goroutines, in its output
					time.Sleep(time.Second)
					t.Fatalf("the faulty worker never reached %s: %+v %s\n%s", step, d.Tasks, e.lastError(id), p.Output())
				}
				var probe *resumeProbe
				if attempts > 1 && step != move.StepSwitch && step != move.StepCutOver { // the source refuses writes after a cut-over
					probe = e.afterKill()
				}
				e.worker(move.Mover{LeaveToCleaner: attempts == 1})
				job := e.Wait(id, 2*time.Minute)
				switch {
				case attempts > 1:
					if job.State != deckhandtype.JobFinished {
						t.Fatalf("job %s after the worker was killed after %s: %s", job.State, step, e.lastError(id))
					}
					if probe != nil {
						probe.check(resumedSteps[step])
					}
					e.moved(id)
					e.cleanupSettled(id, resumedSteps[step])
				case step == move.StepSwitch:
					// The switch was made: the move is complete even though its task failed.
					e.moved(id)
				default:
					if job.State != deckhandtype.JobFailed {
						t.Fatalf("job %s, want failed (its only attempt was killed)", job.State)
					}
					e.asBefore()
				}
			})
		}
	}
}
