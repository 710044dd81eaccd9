package cleanup_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// The test here forges the catalog the way only someone who can bypass its protections could
// (the schema's owner disabling the trigger that keeps an operation's identity fixed): the
// cleaner re-checks on the node that the submitter is a member of the owner, refuses, and
// removes nothing.

// forgeOperation makes an operation look begun for submitter (nil: none recorded).
func (e *env) forgeOperation(opID int64, submitter *string) {
	e.T.Helper()
	e.Exec(e.DB, `ALTER TABLE deckhand.operation DISABLE TRIGGER operation_identity`)
	e.Exec(e.DB, `UPDATE deckhand.operation SET submitted_by = $1 WHERE id = $2`, submitter, opID)
	e.Exec(e.DB, `ALTER TABLE deckhand.operation ENABLE TRIGGER operation_identity`)
}

// A cleanup record's removal runs as its operation's owner for the operation's submitter: a
// forged submitter is refused on the node, a missing one refused outright; either record ends
// failed with its reason, and the resource stays.
func TestForgedRemovalIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.Node("n1")
	alice := e.Role("alice")
	r := e.opRunner()
	var jobs []int64
	for _, table := range []string{"forged_submitter", "no_submitter"} {
		jobs = append(jobs, r.start(func(ctx context.Context, op *cleanup.Operation) error {
			if _, err := op.Register(ctx, cleanup.Table("n1", "public", table), cleanup.Always); err != nil {
				return err
			}
			e.NodeExec(db, "CREATE TABLE "+table+" (id int)")
			return op.Succeed(ctx)
		}))
	}
	for _, id := range jobs {
		if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFinished {
			t.Fatalf("job %d %s", id, job.State)
		}
	}
	e.forgeOperation(e.Records(jobs[0])[0].OperationID, &alice)
	e.forgeOperation(e.Records(jobs[1])[0].OperationID, nil)
	e.deckhand("cleanup", "run") // what became of the records is read below

	for i, want := range []string{
		fmt.Sprintf("submitter %q is not a member of role %q on node n1", alice, pgcluster.Superuser),
		"its operation has no recorded submitter",
	} {
		recs := e.Records(jobs[i])
		if len(recs) != 1 || recs[0].State != deckhandtype.CleanupFailed || recs[0].LastError == nil || !strings.Contains(*recs[0].LastError, want) {
			t.Errorf("record of job %d: %+v, want failed: %s", jobs[i], recs, want)
		}
	}
	for _, table := range []string{"forged_submitter", "no_submitter"} {
		if !e.TableExists(db, table) {
			t.Errorf("table %s was removed for a refused record", table)
		}
	}
}
