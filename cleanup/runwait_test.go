package cleanup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/jackc/pgx/v5"
)

// `deckhand cleanup run --wait D` retries a resource in use as soon as it is free, for up to
// D: also after the record's backoff (1s, then 2s, ...) ran out while it waited, which made
// the run stop there and report the resource in use although D had not passed.
func TestCleanupRunWaitsPastTheBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, tx := dueRecordOfATableInUse(t, e)
	held := 4 * time.Second
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(held)
		tx.Rollback(ctx) //nolint:errcheck
	}()
	// The connection is closed (deferred above) only once the holder has let go.
	defer func() { <-released }()
	start := time.Now()
	code, out, errOut := e.deckhand("cleanup", "run", "--wait", "30s")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("cleanup run: exit %d: %s", code, errOut)
	}
	if rec := e.Records(id)[0]; rec.State != deckhandtype.CleanupRemoved {
		t.Errorf("cleanup run --wait 30s returned after %s with the table %s (held for %s):\n%s", took.Round(time.Millisecond), rec.State, held, out)
	}
	// The summary counts the record once, as it ended: tried in use first, then removed.
	if lines := strings.Split(strings.TrimSpace(out), "\n"); !strings.HasSuffix(lines[len(lines)-1], "1 removed") {
		t.Errorf("cleanup run summary %q, want the table counted once, removed", lines[len(lines)-1])
	}
}

// dueRecordOfATableInUse registers table old_copy of node n1 for removal once its operation
// succeeds, and holds it in use: the record is due, and the returned transaction, which read
// the table, keeps it from being dropped until it ends. id is the operation's job.
func dueRecordOfATableInUse(t *testing.T, e *env) (id int64, tx pgx.Tx) {
	t.Helper()
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE old_copy AS SELECT g AS id FROM generate_series(1, 10) g`)
	r := e.opRunner() // no leader: the run is the only cleaner
	holder := e.NodeConn(db, pgcluster.Superuser)
	t.Cleanup(func() { holder.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM old_copy`); err != nil {
		t.Fatal(err)
	}
	id = r.start(func(ctx context.Context, op *cleanup.Operation) error {
		if _, err := op.Register(ctx, cleanup.Table("n1", "public", "old_copy"), cleanup.DeferredOnSuccess); err != nil {
			return err
		}
		return op.Succeed(ctx)
	})
	if job := e.Wait(id, time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("job %s", job.State)
	}
	return id, tx
}
