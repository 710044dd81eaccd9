package move_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
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
