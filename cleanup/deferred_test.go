package cleanup_test

import (
	"context"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// The cleaner's deferred drop: a deferred_on_success record of a succeeded operation whose
// table a long SELECT uses is removed promptly once the SELECT ends, and while it is
// pending nobody waits longer than the lock timeout (here 200ms, from the catalog setting).
func TestDeferredDropWaitsForQueries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE old_copy AS SELECT g AS id FROM generate_series(1, 1000) g; CREATE TABLE sink (v int)`)
	if err := e.Client.SetSetting(ctx, cleanup.LockTimeoutSetting, "200ms"); err != nil {
		t.Fatal(err)
	}
	// Production intervals: the point is the default latency.
	leader := cleanup.New(e.Client.Catalog(), testenv.Pools(t))
	leader.Logger = testenv.Quiet()
	r := e.opRunner(leader)
	var id int64
	tr := testenv.WithTraffic(t, e.NodeCluster, db, "old_copy", "sink", 3*time.Second, func() {
		id = r.start(func(ctx context.Context, op *cleanup.Operation) error {
			if _, err := op.Register(ctx, cleanup.Table("n1", "public", "old_copy"), cleanup.DeferredOnSuccess); err != nil {
				return err
			}
			return op.Succeed(ctx)
		})
	})
	tr.Check(t, 200*time.Millisecond)
	// The table is gone on the node a moment before the cleaner records it in the catalog.
	rec := e.Records(id)[0]
	for deadline := time.Now().Add(5 * time.Second); rec.State != deckhandtype.CleanupRemoved && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		rec = e.Records(id)[0]
	}
	if rec.State != deckhandtype.CleanupRemoved || rec.Attempts < 2 {
		t.Errorf("record %s after %d attempts; want removed after at least one attempt found it in use", rec.State, rec.Attempts)
	}
}
