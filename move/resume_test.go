package move_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
)

// resumedSteps are the steps after which a killed worker's move is resumed by the next
// attempt rather than restarted.
var resumedSteps = map[string]bool{move.StepIndexes: true, move.StepCatchUp: true}

// resumeProbe holds the target's tables as a killed attempt left them.
type resumeProbe struct {
	e    *failureEnv
	oids map[string]uint32
}

// afterKill records the target's tables and writes to the source, as an application would
// while no worker runs: the next attempt must bring these writes over too.
func (e *failureEnv) afterKill() *resumeProbe {
	e.T.Helper()
	pr := &resumeProbe{e: e, oids: e.targetOIDs()}
	e.asOwner(e.src, `INSERT INTO app.notes SELECT g, 'written while no worker ran' FROM generate_series(500000, 500009) g;
		INSERT INTO app.customers (name) VALUES ('late customer');
		UPDATE app.counters SET v = v + 1`)
	e.sums = e.checksums(e.src, appTables...)
	return pr
}

func (e *failureEnv) targetOIDs() map[string]uint32 {
	e.T.Helper()
	rows, _ := e.NodeConn(e.dst, pgcluster.Superuser).Query(ctx, `
		SELECT c.relname::text, c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'app' AND c.relkind IN ('r', 'p')`)
	out := map[string]uint32{}
	for rows.Next() {
		var name string
		var oid int64
		if err := rows.Scan(&name, &oid); err != nil {
			e.T.Fatal(err)
		}
		out[name] = uint32(oid)
	}
	if err := rows.Err(); err != nil {
		e.T.Fatal(err)
	}
	return out
}

// check, once the job finished and before the source is dropped, that the next attempt kept
// the target's tables (resumed: same tables, each row inserted once, the copy not redone) or
// made them anew (restarted).
func (pr *resumeProbe) check(resumed bool) {
	e := pr.e
	e.T.Helper()
	if len(pr.oids) == 0 {
		if resumed {
			e.T.Fatal("the killed attempt left no target tables to resume with")
		}
		return
	}
	now := e.targetOIDs()
	for name, oid := range pr.oids {
		if kept := now[name] == oid; kept != resumed {
			e.T.Errorf("target table app.%s: kept %v (oid %d, now %d), want kept %v", name, kept, oid, now[name], resumed)
		}
	}
	if !resumed {
		return
	}
	// Every row inserted into a target table exactly once: the copy's rows by the first
	// attempt, the changes by the catch-up; a second copy would add its rows (or fail on
	// the keys, and count them all the same).
	conn := e.NodeConn(e.dst, pgcluster.Superuser)
	defer conn.Close(ctx)
	testenv.Eventually(e.T, 20*time.Second, func() bool {
		rows, _ := conn.Query(ctx, `SELECT s.relname::text, s.n_tup_ins FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
			WHERE s.schemaname = 'app' AND c.relkind = 'r'`)
		ins, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Name string
			Ins  int64
		}])
		if err != nil || len(ins) == 0 {
			e.T.Logf("pg_stat_user_tables: %v", err)
			return false
		}
		for _, t := range ins {
			var n int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM ONLY app.`+pgx.Identifier{t.Name}.Sanitize()).Scan(&n); err != nil {
				e.T.Fatal(err)
			}
			if t.Ins != n {
				e.T.Logf("app.%s on the target: %d inserted, %d rows", t.Name, t.Ins, n)
				return false
			}
		}
		return true
	}, "every target row inserted once")
}

var scaffoldOp = regexp.MustCompile(`^deckhand_move_([0-9]+)_`)

// cleanupSettled checks the job's cleanup records once `deckhand cleanup run` ran: nothing is
// left to remove or failed, and, after a resume, the slot the dead attempt made was removed as
// a record of the later, succeeded operation that took it over.
func (e *failureEnv) cleanupSettled(jobID int64, resumed bool) {
	e.T.Helper()
	recs, err := e.Client.Catalog().CleanupRecords(ctx, deckhandtype.CleanupFilter{JobID: jobID})
	if err != nil {
		e.T.Fatal(err)
	}
	takenOver := false
	for _, r := range recs {
		switch r.State {
		case "removed", "forgotten":
		default:
			e.T.Errorf("cleanup record %d (%s %s) is %s", r.ID, r.Type, r.Name, r.State)
		}
		if m := scaffoldOp.FindStringSubmatch(r.Name); r.Type == deckhandtype.ResourceReplicationSlot && m != nil {
			made, _ := strconv.ParseInt(m[1], 10, 64)
			if made != r.OperationID {
				takenOver = true
				if r.OperationState != deckhandtype.OperationSucceeded || r.State != "removed" {
					e.T.Errorf("slot %s taken over by operation %d (%s) is %s", r.Name, r.OperationID, r.OperationState, r.State)
				}
			}
		}
	}
	if takenOver != resumed {
		e.T.Errorf("a slot taken over by a later operation: %v, want %v (records: %s)", takenOver, resumed, fmt.Sprint(recs))
	}
}

// runKilled runs a faulty worker that kills itself after step, waits for it to die, and
// returns its output.
func (e *failureEnv) runKilled(bin, step string, id int64) string {
	e.T.Helper()
	p := e.ServeBinary(bin, []string{"DECKHAND_FAULT=kill-after-move-step:" + step}, "--lease", "1s", "--concurrency", "1")
	done := make(chan error, 1)
	go func() { done <- p.Cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			e.T.Fatalf("the faulty worker exited with %v, want killed after %s:\n%s", err, step, p.Output())
		}
	case <-time.After(60 * time.Second):
		p.Cmd.Process.Signal(syscall.SIGQUIT) //nolint:errcheck // its goroutines, in its output
		time.Sleep(time.Second)
		e.T.Fatalf("the faulty worker never reached %s: %s\n%s", step, e.lastError(id), p.Output())
	}
	return p.Output()
}

// A move whose worker dies after the indexes, then whose resuming worker dies during the
// catch-up in turn, is resumed again by the third attempt: the first attempt's tables are
// kept throughout, every write made meanwhile arrives once, and the cleanup records end
// removed.
func TestMoveResumedTwice(t *testing.T) {
	bin := testenv.FaultBinary(t)
	e := newFailureEnv(t)
	id := e.submitMove(3)
	e.runKilled(bin, move.StepIndexes, id)
	probe := e.afterKill()
	if out := e.runKilled(bin, move.StepCatchUp, id); !strings.Contains(out, "move: resuming the catch-up of an earlier attempt") {
		t.Errorf("the second attempt did not say it resumed:\n%s", out)
	}
	e.asOwner(e.src, `INSERT INTO app.notes SELECT g, 'written after the second death' FROM generate_series(600000, 600004) g`)
	e.sums = e.checksums(e.src, appTables...)
	e.worker(move.Mover{})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s: %s", job.State, e.lastError(id))
	}
	probe.check(true)
	e.moved(id)
	e.cleanupSettled(id, true)
}

// A move whose worker died after the catch-up began, and whose slot is gone since (dropped by
// an operator), is not resumed: the next attempt restarts cleanly — new target tables, every
// row, nothing left to clean up.
func TestMoveResumeFallsBackToRestart(t *testing.T) {
	bin := testenv.FaultBinary(t)
	e := newFailureEnv(t)
	id := e.submitMove(3)
	e.runKilled(bin, move.StepCatchUp, id)
	probe := e.afterKill()
	super := e.NodeConn(e.src, pgcluster.Superuser)
	testenv.Eventually(t, 30*time.Second, func() bool {
		var dropped int
		err := super.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
			WHERE slot_name LIKE 'deckhand\_move\_%' AND NOT active`).Scan(&dropped)
		return err == nil && dropped == 1
	}, "the dead attempt's slot dropped")
	e.worker(move.Mover{})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s: %s", job.State, e.lastError(id))
	}
	probe.check(false)
	e.moved(id)
	recs, err := e.Client.Catalog().CleanupRecords(ctx, deckhandtype.CleanupFilter{JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	why := ""
	for _, r := range recs {
		if r.State != "removed" && r.State != "forgotten" {
			t.Errorf("cleanup record %d (%s %s) is %s", r.ID, r.Type, r.Name, r.State)
		}
		// The attempt that found the slot gone took the records over, then failed its operation.
		if m := scaffoldOp.FindStringSubmatch(r.Name); r.Type == deckhandtype.ResourceReplicationSlot && m != nil && m[1] != strconv.FormatInt(r.OperationID, 10) {
			op, err := e.Client.Catalog().OperationByID(ctx, r.OperationID)
			if err != nil {
				t.Fatal(err)
			}
			if op.EndReason != nil {
				why = *op.EndReason
			}
		}
	}
	if !strings.Contains(why, "not resumed: the replication slot is gone") {
		t.Errorf("the attempt that did not resume ended with %q", why)
	}
}
