package move_test

import (
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// A move with nothing failing, while a writer keeps inserting: every row committed before the
// switch is on the target, the source table and all the scaffolding are gone, and the records
// say so.
func TestMoveTable(t *testing.T) {
	t.Parallel()
	e := newMoveEnv(t)
	preSrc, _ := e.snapshots()
	e.WorkerWith([]engine.Feature{moveKind(e.Env, false)})

	type write struct {
		id    int64
		acked time.Time
	}
	var (
		mu     sync.Mutex
		writes []write
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	writer := e.NodeConn(e.src, pgcluster.Superuser)
	go func() {
		defer close(done)
		for id := int64(1_000_000); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := writer.Exec(ctx, `INSERT INTO app.orders VALUES ($1, 'writer', 1, '')`, id)
			if err != nil {
				return // the table is gone
			}
			mu.Lock()
			writes = append(writes, write{id, time.Now()})
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()

	id := e.Submit(e.moveJob())
	job := e.Wait(id, time.Minute)
	close(stop)
	<-done
	if job.State != deckhandtype.JobFinished {
		d, _ := e.Client.Job(ctx, id)
		t.Fatalf("job %s: %v", job.State, d.Tasks[0].LastError)
	}
	recs := e.Records(id)
	op, err := e.Client.Catalog().OperationByID(ctx, recs[0].OperationID)
	if err != nil || op.State != deckhandtype.OperationSucceeded || op.EndedAt == nil {
		t.Fatalf("operation %+v, %v", op, err)
	}
	// Writes acknowledged before the switch committed must all have reached the target.
	dst := e.NodeConn(e.dst, pgcluster.Superuser)
	var before []int64
	mu.Lock()
	for _, w := range writes {
		if w.acked.Before(*op.EndedAt) {
			before = append(before, w.id)
		}
	}
	mu.Unlock()
	var found int
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM app.orders WHERE id = ANY($1)`, before).Scan(&found); err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 || found != len(before) {
		t.Errorf("%d writes acknowledged before the switch, %d of them on the target", len(before), found)
	}
	var original int
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM app.orders WHERE id <= 2000`).Scan(&original); err != nil || original != 2000 {
		t.Errorf("target has %d of the 2000 original rows (%v)", original, err)
	}

	// The inline removal may leave the slot a moment (its walsender lingers); the run finishes.
	e.cleanupRun()
	wantSrc, wantDst := e.moved(preSrc)
	src, dstSnap := e.snapshots()
	if d := testenv.Diff(wantSrc, src); d != "" {
		t.Errorf("source after the move:\n%s", d)
	}
	// The target's rows include the writer's; compare its objects only.
	dstObjects := filter(dstSnap, func(s string) bool { return !strings.HasPrefix(s, "rows of") })
	if d := testenv.Diff(filter(wantDst, func(s string) bool { return !strings.HasPrefix(s, "rows of") }), dstObjects); d != "" {
		t.Errorf("target after the move:\n%s", d)
	}
	for _, r := range e.Records(id) {
		want := deckhandtype.CleanupRemoved
		if r.Policy == deckhandtype.PolicyOnFailure {
			want = deckhandtype.CleanupForgotten
		}
		if r.State != want {
			t.Errorf("record %d (%s %s, %s) is %s, want %s", r.ID, r.Type, r.Resource().Display(), r.Policy, r.State, want)
		}
	}
}

func filter(in []string, keep func(string) bool) []string {
	var out []string
	for _, s := range in {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// stepStatement matches, for each step of a move, the statement a worker sends to do it.
var stepStatement = map[string]*regexp.Regexp{
	move.StepCreateTable:        regexp.MustCompile(`^CREATE TABLE`),
	move.StepCreatePublication:  regexp.MustCompile(`^CREATE PUBLICATION`),
	move.StepCreateSlot:         regexp.MustCompile(`^CREATE_REPLICATION_SLOT`),
	move.StepCreateSubscription: regexp.MustCompile(`^CREATE SUBSCRIPTION`),
	move.StepCopy:               regexp.MustCompile(`^COPY .* FROM STDIN`),
	move.StepSwitch:             regexp.MustCompile(`^LOCK TABLE`),
	move.StepDrop:               regexp.MustCompile(`^ALTER SUBSCRIPTION .* DISABLE`),
}

// For a failure injected at each step of a move — the step's statement fails, or its
// connection drops — `deckhand cleanup run` leaves exactly the state before the move on both
// nodes (after the switch: exactly the moved state), and every record is removed or, where
// its policy keeps the resource, forgotten. Until the drop step, the worker removes nothing
// itself, so that the command does all the work.
func TestMoveFailsAtEachStep(t *testing.T) {
	t.Parallel()
	for _, step := range move.MoveSteps {
		for _, action := range []pgtest.Action{pgtest.ActionError, pgtest.ActionDrop} {
			t.Run(step+"/"+action.String(), func(t *testing.T) {
				t.Parallel()
				e := newMoveEnv(t)
				preSrc, preDst := e.snapshots()
				e.Proxy.AddRule(pgtest.Rule{Name: step, Match: stepStatement[step], Action: action, Times: 1,
					Code: "58000", Message: "injected at " + step})
				e.WorkerWith([]engine.Feature{moveKind(e.Env, step != move.StepDrop)})
				id := e.Submit(e.moveJob())
				job := e.Wait(id, time.Minute)
				if e.Proxy.Hits(step) != 1 {
					t.Fatalf("the fault at %s fired %d times", step, e.Proxy.Hits(step))
				}
				succeeded := step == move.StepDrop
				if wantState := map[bool]deckhandtype.JobState{true: deckhandtype.JobFinished, false: deckhandtype.JobFailed}[succeeded]; job.State != wantState {
					d, _ := e.Client.Job(ctx, id)
					t.Fatalf("job %s, want %s: %v", job.State, wantState, d.Tasks[0].LastError)
				}
				out := e.cleanupRun()
				t.Logf("cleanup run:\n%s", out)
				wantSrc, wantDst := preSrc, preDst
				if succeeded {
					wantSrc, wantDst = e.moved(preSrc)
				}
				e.checkState(id, wantSrc, wantDst, succeeded)
			})
		}
	}
}

// kill -9 of the worker process at each step of a move (its statement held by the proxy
// until the process is dead): once its lease has expired, `deckhand cleanup run` leaves exactly
// the state before the move (after the switch: the moved state), with no leader running.
func TestMoveKilledAtEachStep(t *testing.T) {
	t.Parallel()
	for _, step := range move.MoveSteps {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			e := newMoveEnv(t)
			preSrc, preDst := e.snapshots()
			remove := e.Proxy.AddRule(pgtest.Rule{Name: step, Match: stepStatement[step], Action: pgtest.ActionStall})
			victim := e.Serve("--lease", "1s", "--maintenance-interval", "100ms")
			id := e.Submit(e.moveJob())
			testenv.Eventually(t, time.Minute, func() bool {
				if j, err := e.Client.JobRow(ctx, id); err == nil && j.State.Terminal() {
					d, _ := e.Client.Job(ctx, id)
					t.Fatalf("job %d %s before reaching %s: %v", id, j.State, step, d.Tasks[0].LastError)
				}
				return e.Proxy.Hits(step) > 0
			}, "the worker reaches "+step)
			if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = victim.Cmd.Wait()
			// The held statement dies with its connection, as it would with the process.
			e.Proxy.DropAll()
			remove()
			testenv.Eventually(t, 10*time.Second, func() bool {
				ws, err := e.Client.Workers(ctx, true)
				return err == nil && len(ws) == 1 && !ws[0].Alive
			}, "the killed worker's lease expires")
			out := e.cleanupRun()
			t.Logf("cleanup run:\n%s", out)
			succeeded := step == move.StepDrop
			wantSrc, wantDst := preSrc, preDst
			if succeeded {
				wantSrc, wantDst = e.moved(preSrc)
			}
			e.checkState(id, wantSrc, wantDst, succeeded)
			job, err := e.Client.JobRow(ctx, id)
			if err != nil || job.State.Terminal() {
				t.Errorf("job %d is %s (%v): nothing should have ended it but the cleanup run", id, job.State, err)
			}
		})
	}
}
