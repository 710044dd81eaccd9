package move_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// deckhand.move_progress counts the copy of the attempt that copies: an attempt that starts
// the copy over (after an earlier one failed, was released by a pause or died) counts from
// zero, so a move of a schema never shows more tables or rows copied than it has; and
// tables counts what the copy copies (a partitioned table has no rows of its own), so that
// tables_copied reaches it.
func TestMoveProgressCountsOneCopy(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	var rows int64
	conn := e.NodeConn(e.src, pgcluster.Superuser)
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM app.customers) + (SELECT count(*) FROM app.orders)
		+ (SELECT count(*) FROM app.events) + (SELECT count(*) FROM app.counters) + (SELECT count(*) FROM app.notes)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	failed := false
	e.worker(move.Mover{AfterStep: func(_ context.Context, step string) error {
		if step == move.StepCopy && !failed {
			failed = true
			return errors.New("injected failure after the copy")
		}
		return nil
	}})
	id := e.Submit(&spec.Job{Description: "move", Tasks: e.schemaMoves(2, "app")})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
	if !failed {
		t.Fatal("no failure was injected")
	}
	progress, ok, err := e.Client.Catalog().MoveProgress(ctx, mustTask(t, e, id))
	if err != nil || !ok {
		t.Fatalf("move progress: %v (found: %v)", err, ok)
	}
	// customers, orders, events_low, events_high, counters, notes: partitions are copied one by one.
	if progress.Tables != 6 {
		t.Errorf("move_progress says the move has %d tables to copy, want 6", progress.Tables)
	}
	if progress.TablesCopied != 6 || progress.RowsCopied != rows {
		t.Errorf("after two copies, move_progress says %d tables and %d rows copied; the schema has 6 tables and %d rows",
			progress.TablesCopied, progress.RowsCopied, rows)
	}
}
