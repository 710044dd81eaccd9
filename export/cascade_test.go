package export_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A standby of the group replays its upstream's WAL, whichever server that is. When its
// upstream, a standby of the primary, is promoted while the primary still runs and holds an
// export's consistency point (a split brain; the promoted server need not be registered, a
// disaster-recovery copy say), the standby follows it onto a history of its own: past the
// point's position it holds the second server's rows, not the point's. No part may be read
// there; the export fails or commits exactly the rows of the primary that holds the point.
func TestExportReadsNothingOnAStandbyOfASecondPrimary(t *testing.T) {
	// A standby is copied from a standby only with full_page_writes on.
	g := newOwnGroup(t, 1, pgcluster.Options{Durable: true})
	// c1 streams from s1, which streams from p1; s1 leaves the group, c1 joins it.
	cascade := pgtest.NewStandby(t, g.standby, pgcluster.Options{Durable: true})
	if err := g.env.Client.RemoveNode(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := g.env.Client.AddNode(ctx, deckhandtype.Node{Name: "c1", DSN: cascade.DSN(g.db, pgcluster.Superuser), Group: "g1", MaxTasks: 4}); err != nil {
		t.Fatal(err)
	}
	g.env.Worker(engine.Config{Concurrency: 4, MaintenanceInterval: 50 * time.Millisecond})
	waitRoles(t, g, "the leader records c1 as a standby", map[string]func(deckhandtype.Node) bool{
		"p1": func(n deckhandtype.Node) bool { return n.Role == "primary" && n.LastError == nil },
		"c1": func(n deckhandtype.Node) bool { return n.Role == "standby" && n.LastError == nil },
	})
	e, dir := pausedAfterAPart(t, g, 1)
	if err := g.standby.Exec(ctx, "postgres", `SELECT pg_promote()`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		standby, err := g.standby.IsStandby(ctx)
		return err == nil && !standby
	}, "s1 is promoted")
	if err := g.standby.Exec(ctx, g.db, `DELETE FROM events_2024`); err != nil {
		t.Fatal(err)
	}
	lsn, err := g.standby.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cascade.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	failsSayingOrCommitsThePointsRows(t, g, e, dir, "history", "c1 follows another history")
}
