package export_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A forced export may start at a destination whose export failed or was cancelled: that one
// holds nothing. But its submitter may retry it, and it commits there again. The forced one,
// held back meanwhile (paused by its submitter), then committed over it, with rows of its
// submitter's choosing, and superseded it: the very replacement the check at submission
// refuses. A forced export commits only over exports its submitter may act on.
func TestAttackForcedExportCommitsOverARetriedExport(t *testing.T) {
	p := aliceAndBobShareAPrefix(t)
	e, db, dest, asAlice, asBob := p.env, p.db, p.dest, p.asAlice, p.asBob
	node := pgcluster.Superuser
	// hold keeps table's writers' lock on the node, so that an export of it waits for its
	// SHARE lock; the returned func lets go.
	hold := func(table string) func() {
		conn := pgtest.Connect(t, e.Cluster.DSN(db, node))
		if _, err := conn.Exec(ctx, `BEGIN; LOCK TABLE `+table+` IN ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return func() { conn.Exec(ctx, `ROLLBACK`) } //nolint:errcheck
	}

	// Alice's export is cancelled before it commits.
	release := hold("facts")
	v, err := export.Start(ctx, asAlice, export.Request{Table: "facts", Group: "n1", To: dest, MaxAttempts: 20})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := asAlice.Cancel(ctx, v.JobID); err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, v.JobID, deckhandtype.JobCancelled)
	release()

	// Bob forces an export there (alice's holds nothing), and holds it back, paused.
	release = hold("forged")
	h, err := export.Start(ctx, asBob, export.Request{Table: "forged", Group: "n1", To: dest, Force: true, MaxAttempts: 20})
	if err != nil {
		t.Fatalf("bob's forced export over a cancelled one: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := asBob.Pause(ctx, h.JobID, true); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		job, err := e.Client.JobRow(ctx, h.JobID)
		return err == nil && job.State == deckhandtype.JobPaused
	}, "bob's export is paused")
	release()

	// Alice retries hers: it commits.
	if _, err := asAlice.Retry(ctx, v.JobID); err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, v.JobID, deckhandtype.JobFinished)
	before, err := os.ReadFile(p.manifest)
	if err != nil {
		t.Fatal(err)
	}

	// Bob resumes his: it must not replace alice's committed export.
	if _, err := asBob.Resume(ctx, h.JobID); err != nil {
		t.Fatal(err)
	}
	job := e.Wait(h.JobID, 60*time.Second)
	if job.State != deckhandtype.JobFailed {
		t.Errorf("bob's forced export, resumed after alice's committed: %s, want failed", job.State)
	} else if msg := jobErrors(t, e, h.JobID); !strings.Contains(msg, "may not force") {
		t.Errorf("bob's forced export failed with %q, want it to say he may not force it over alice's", msg)
	}
	if got, err := asAlice.Catalog().Export(ctx, v.ID); err != nil || got.State != "committed" {
		t.Errorf("alice's export after bob's: %+v, %v", got, err)
	}
	if after, err := os.ReadFile(p.manifest); err != nil || string(after) != string(before) {
		t.Errorf("alice's manifest was replaced (err %v)", err)
	}
}
