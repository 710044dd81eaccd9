package drop_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A pin taken while a drop waits for the queries that use the table (a legal hold decided
// meanwhile) keeps the table: the drop checks the pins again once it holds the table's lock,
// not only when it starts, and fails saying so.
func TestPinTakenWhileADropWaitsKeepsTheTable(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	e.NodeExec(db, `CREATE TABLE held (id int); CREATE TABLE indexed (id int); CREATE INDEX indexed_id ON indexed (id)`)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	reader := e.NodeConn(db, pgcluster.Superuser)
	if _, err := reader.Exec(ctx, `BEGIN; SELECT FROM held; SELECT FROM indexed`); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, table := range []string{"public.held", "public.indexed"} {
		out := clitest.Run(t, e.DSN, "drop", "--node", "n1", table)
		id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("deckhand drop printed %q", out)
		}
		ids = append(ids, id)
		testenv.Eventually(t, 20*time.Second, func() bool {
			d, err := e.Client.Job(ctx, id)
			return err == nil && d.Tasks[0].State == deckhandtype.TaskRunning
		}, "the drop runs, waiting for the reader")
	}
	time.Sleep(300 * time.Millisecond) // past the drops' first checks
	clitest.Run(t, e.DSN, "cleanup", "pin", "--node", "n1", "--reason", "legal hold", "public.held")
	clitest.Run(t, e.DSN, "cleanup", "pin", "--node", "n1", "--type", "index", "--reason", "audit", "public.indexed_id")
	if _, err := reader.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	for i, table := range []string{"held", "indexed"} {
		if job := e.Wait(ids[i], 30*time.Second); job.State != deckhandtype.JobFailed {
			t.Errorf("drop of %s: job %s, want failed: pinned while it waited", table, job.State)
		}
		if !e.TableExists(db, table) {
			t.Errorf("%s was dropped although pinned", table)
		}
	}
	e.FailedWith(ids[0], "pinned by pin")
	e.FailedWith(ids[1], "pinned by pin", "indexed_id")
}
