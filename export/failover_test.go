package export_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// failOver stops the group's primary and promotes its standby, then waits until the leader
// has recorded s1 as primary and p1 as not answering (with the role it last had).
func failOver(t *testing.T, g *group) {
	t.Helper()
	waitRoles(t, g, "the leader records p1 primary and s1 standby", map[string]func(deckhandtype.Node) bool{
		"p1": func(n deckhandtype.Node) bool { return n.Role == "primary" },
		"s1": func(n deckhandtype.Node) bool { return n.Role == "standby" },
	})
	if err := g.primary.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := g.standby.Exec(ctx, "postgres", `SELECT pg_promote()`); err != nil {
		t.Fatal(err)
	}
	waitRoles(t, g, "the leader records s1 primary, and p1 unreachable with its last role", map[string]func(deckhandtype.Node) bool{
		"p1": func(n deckhandtype.Node) bool { return n.Role == "primary" && n.LastError != nil },
		"s1": func(n deckhandtype.Node) bool { return n.Role == "primary" && n.LastError == nil },
	})
}

func waitRoles(t *testing.T, g *group, what string, want map[string]func(deckhandtype.Node) bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() bool {
		nodes, err := g.env.Client.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if !want[n.Name](n) {
				return false
			}
		}
		return true
	}, what)
}

// finishedOn waits for the export's job to finish and checks that its coordinator ran on node.
func finishedOn(t *testing.T, g *group, e *deckhandtype.Export, node string) {
	t.Helper()
	if job := g.env.Wait(e.JobID, time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("export job %s: %s", job.State, lastError(t, g, e.JobID))
	}
	d, err := g.env.Client.Job(ctx, e.JobID)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range d.Tasks {
		if task.Kind == export.KindCoordinator && (task.Node == nil || *task.Node != node) {
			t.Errorf("coordinator on %v, want %s, the group's new primary", task.Node, node)
		}
	}
}

// After a failover of the group — the primary down, its standby promoted — the catalog still
// records the old primary as primary (a probe that cannot reach a node keeps its last role),
// beside the new one. An export of the group goes to the promoted standby, the only primary
// that answers, rather than being refused as a group of two primaries, and no part is dealt
// to the old primary.
func TestExportAfterGroupFailover(t *testing.T) {
	g := newOwnGroup(t, 2, pgcluster.Options{})
	g.env.Worker(engine.Config{Concurrency: 4, MaintenanceInterval: 50 * time.Millisecond})
	failOver(t, g)
	e, err := export.Start(ctx, g.env.Client, export.Request{
		Table: "events", Partition: "events_2025", Group: "g1", To: "file://" + t.TempDir(),
	})
	if err != nil {
		t.Fatalf("export after the failover: %v", err)
	}
	finishedOn(t, g, e, "s1")
}

// An export under way when its group fails over (here paused, so that the failover falls
// between two of its coordinator's attempts) moves its coordinator to the new primary and
// commits there, rather than failing every attempt on the old primary.
func TestExportCoordinatorFollowsTheNewPrimary(t *testing.T) {
	g := newOwnGroup(t, 1, pgcluster.Options{})
	g.env.Worker(engine.Config{Concurrency: 2, MaintenanceInterval: 50 * time.Millisecond})
	e, dir := pausedAfterAPart(t, g, 0)
	failOver(t, g)
	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	finishedOn(t, g, e, "s1")
	everyRowOnce(t, g, dir)
}

// The same, with the old primary removed from the catalog (deckhand node remove) after the
// failover and before the export resumes: its coordinator, bound to the removed node, is
// moved to the group's primary by the leader rather than failed as a task of a removed node.
func TestExportCoordinatorOfARemovedPrimaryFollowsTheNewOne(t *testing.T) {
	g := newOwnGroup(t, 1, pgcluster.Options{})
	g.env.Worker(engine.Config{Concurrency: 2, MaintenanceInterval: 50 * time.Millisecond})
	e, dir := pausedAfterAPart(t, g, 0)
	failOver(t, g)
	if err := g.env.Client.RemoveNode(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	finishedOn(t, g, e, "s1")
	everyRowOnce(t, g, dir)
}

// A standby promoted while the primary still runs and holds an export's consistency point
// (a split brain) has a history of its own: no part of the export is read there. Here the
// promoted standby has lost the partition's rows meanwhile; the export must not commit
// without them — it fails, saying the group has two primaries, or commits every row read on
// the primary that holds the point.
func TestExportReadsNothingOnASecondPrimary(t *testing.T) {
	g := newOwnGroup(t, 1, pgcluster.Options{})
	g.env.Worker(engine.Config{Concurrency: 2, MaintenanceInterval: 50 * time.Millisecond})
	e, dir := pausedAfterAPart(t, g, 1)
	if err := g.standby.Exec(ctx, "postgres", `SELECT pg_promote()`); err != nil {
		t.Fatal(err)
	}
	waitRoles(t, g, "the leader records both as primaries", map[string]func(deckhandtype.Node) bool{
		"p1": func(n deckhandtype.Node) bool { return n.Role == "primary" && n.LastError == nil },
		"s1": func(n deckhandtype.Node) bool { return n.Role == "primary" && n.LastError == nil },
	})
	if err := g.standby.Exec(ctx, g.db, `DELETE FROM events_2024`); err != nil {
		t.Fatal(err)
	}
	if _, err := g.env.Client.Resume(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	failsSayingOrCommitsThePointsRows(t, g, e, dir, "two primaries", "the group has two primaries")
}
