package move_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
)

// placementsNow reads deckhand.placements and deckhand.placement_moves.
func (e *moveEnv) placementsNow() ([]deckhandtype.Placement, []deckhandtype.PlacementMove) {
	e.T.Helper()
	placed, err := e.Client.Catalog().Placements(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	moving, err := e.Client.Catalog().MovesUnderWay(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	return placed, moving
}

// Placements name a schema (or a table) by its name alone, across every group, so a move must
// not place a name that another group holds. A tenant's schema billing lives on g1, never
// moved (no placement). Another role owns a schema also named billing in a database of its
// own, group g3, and moves it to g2: refused, naming g1, before anything is created, and the
// placements stay as they were (none) — the first tenant is not routed to g2, and its own
// move of billing is refused for the same reason (g3 holds the name), not as placed
// elsewhere. The same for a table move of a table name g1 holds.
func TestMoveRefusesANameAnotherGroupHolds(t *testing.T) {
	e := newMoveEnv(t)
	e.NodeExec(e.src, `CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int PRIMARY KEY); INSERT INTO billing.invoices VALUES (1)`)
	own := testenv.Database(t, e.NodeCluster, "own")
	e.NodeExec(own, "GRANT CREATE ON DATABASE "+own+" TO "+e.ownerIdent())
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "own", DSN: e.Proxy.DSN(own, pgcluster.Superuser), Group: "g3", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.NodeCluster.Exec(context.Background(), own, "DROP OWNED BY "+e.ownerIdent()) })
	e.asOwner(own, `CREATE SCHEMA billing; CREATE TABLE billing.x (id int PRIMARY KEY); CREATE TABLE billing.invoices (id int PRIMARY KEY)`)
	preSrc, preDst, preOwn := e.Snapshot(e.src), e.Snapshot(e.dst), e.Snapshot(own)

	// One after the other: a live job's move of billing holds it from the other two.
	e.worker(move.Mover{})
	for _, c := range []struct {
		req  move.Request
		want string
	}{
		{move.Request{Schema: "billing", From: "g3", To: "g2"}, "schema billing also exists on group g1 (node src)"},
		{move.Request{Tables: []string{"billing.invoices"}, From: "g3", To: "g2"}, "table billing.invoices also exists on group g1 (node src)"},
		{move.Request{Schema: "billing", From: "g1", To: "g2", Owner: pgcluster.Superuser}, "schema billing also exists on group g3 (node own)"},
	} {
		id := e.submit(c.req)
		job := e.Wait(id, time.Minute)
		msg := e.lastError(id)
		if job.State != deckhandtype.JobFailed || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") ||
			strings.Contains(msg, "placed elsewhere") {
			t.Errorf("job %d: %s, error %q; want failed with one line saying %q", id, job.State, msg, c.want)
		}
		if recs := e.Records(id); len(recs) != 0 {
			t.Errorf("job %d, refused, registered %d resources", id, len(recs))
		}
	}
	placed, moving := e.placementsNow()
	if len(placed) != 0 || len(moving) != 0 {
		t.Errorf("after the refused moves: placements %+v, moves under way %+v; want none", placed, moving)
	}
	for db, pre := range map[string][]string{e.src: preSrc, e.dst: preDst, own: preOwn} {
		if d := testenv.Diff(pre, e.Snapshot(db)); d != "" {
			t.Errorf("the refused moves changed database %s:\n%s", db, d)
		}
	}
}

// A move that fails leaves the placements exactly as they were: no placement for a schema the
// catalog did not place (its mark, while it moved, was never one: deckhand.placements and
// `deckhand placements` do not show it, deckhand.placement_moves does), and a placed schema
// where it was, unchanged. The failure comes after the cut-over, the last step before the
// switch.
func TestFailedMoveLeavesNoPlacement(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA fresh; CREATE TABLE fresh.t (id int PRIMARY KEY); INSERT INTO fresh.t SELECT generate_series(1, 100);
		CREATE SCHEMA placed; CREATE TABLE placed.t (id int PRIMARY KEY); INSERT INTO placed.t SELECT generate_series(1, 100)`)
	// placed was put on g1 by an earlier move (job 1 stands for it).
	if err := e.Client.Catalog().SwitchPlacement(ctx, 1, []deckhandtype.PlacedObject{{Schema: "placed"}}, "g1"); err != nil {
		t.Fatal(err)
	}
	before, _ := e.placementsNow()
	if len(before) != 1 || before[0].Schema != "placed" || before[0].Group != "g1" {
		t.Fatalf("placements before the moves: %+v", before)
	}

	// What the views say at the end of each copy, while the moves' marks are there.
	var mu sync.Mutex
	movingSeen := map[string]string{} // schema -> target, from deckhand.placement_moves
	placedSeen := map[string]string{} // schema -> groups, from deckhand.placements
	m := move.Mover{AfterStep: func(_ context.Context, step string) error {
		if step == move.StepCutOver {
			return taskerr.Permanent(errors.New("injected failure after the cut-over"))
		}
		if step != move.StepCopy {
			return nil
		}
		placed, err := e.Client.Catalog().Placements(ctx)
		if err != nil {
			return err
		}
		moving, err := e.Client.Catalog().MovesUnderWay(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, mv := range moving {
			movingSeen[mv.Schema] = mv.To
		}
		for _, p := range placed {
			if !strings.Contains(placedSeen[p.Schema], p.Group+";") {
				placedSeen[p.Schema] += p.Group + ";"
			}
		}
		return nil
	}}
	ids := []int64{
		e.submit(move.Request{Schema: "fresh", From: "g1", To: "g2"}),
		e.submit(move.Request{Schema: "placed", From: "g1", To: "g2"}),
	}
	e.worker(m)
	for _, id := range ids {
		if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFailed || !strings.Contains(e.lastError(id), "injected failure") {
			t.Fatalf("job %d: %s (%s), want failed by the injected failure", id, job.State, e.lastError(id))
		}
	}
	mu.Lock()
	if movingSeen["fresh"] != "g2" || movingSeen["placed"] != "g2" || placedSeen["fresh"] != "" || placedSeen["placed"] != "g1;" {
		t.Errorf("during the copies: moving %v, placed %v; want both moving to g2, fresh placed nowhere, placed on g1", movingSeen, placedSeen)
	}
	mu.Unlock()

	after, moving := e.placementsNow()
	if len(after) != 1 || len(moving) != 0 {
		t.Fatalf("after the failed moves: placements %+v, moves under way %+v; want placed's alone and none", after, moving)
	}
	if a, b := after[0], before[0]; a.Schema != "placed" || a.Table != nil || a.Group != b.Group || !a.Since.Equal(b.Since) ||
		a.JobID == nil || *a.JobID != 1 || a.MovingJobID != nil || a.MovingTo != nil {
		t.Errorf("placement of placed after its failed move: %+v, want as before: %+v", a, b)
	}
	var listed []deckhandtype.Placement
	out := clitest.Run(t, e.DSN, "placements", "-o", "json")
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || listed[0].Schema != "placed" || listed[0].Group != "g1" {
		t.Errorf("deckhand placements -o json after the failed moves: %s (%v)", out, err)
	}
	if text := clitest.Run(t, e.DSN, "placements"); strings.Contains(text, "fresh") {
		t.Errorf("deckhand placements lists fresh, which no move placed:\n%s", text)
	}
}

// A schema of the moved name created on another group while the move runs is found by the
// check after the cut-over, before the switch: the move fails instead of placing the name,
// places nothing, and its failure puts the source back (writable) and removes the target's
// copy.
func TestMoveFailsWhenTheNameAppearsElsewhereDuringIt(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY); INSERT INTO app.t SELECT generate_series(1, 100)`)
	other := testenv.Database(t, e.NodeCluster, "other")
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "other", DSN: e.Proxy.DSN(other, pgcluster.Superuser), Group: "g3", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	e.worker(move.Mover{AfterStep: func(_ context.Context, step string) error {
		if step == move.StepCutOver {
			once.Do(func() { e.NodeExec(other, `CREATE SCHEMA app`) })
		}
		return nil
	}})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	job := e.Wait(id, 2*time.Minute)
	if msg := e.lastError(id); job.State != deckhandtype.JobFailed || !strings.Contains(msg, "schema app also exists on group g3 (node other)") {
		t.Fatalf("job %s (%s), want failed: app now exists on g3", job.State, msg)
	}
	if placed, moving := e.placementsNow(); len(placed) != 0 || len(moving) != 0 {
		t.Errorf("after the failed move: placements %+v, moves under way %+v; want none", placed, moving)
	}
	e.cleanupRun()
	if e.schemaExists(e.dst, "app") {
		t.Error("the target kept the failed move's copy of app")
	}
	conn := e.NodeConn(e.src, e.owner)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO app.t VALUES (101)`); err != nil {
		t.Errorf("the source refuses writes after the failed move: %v", err)
	}
}

// The catalog knows where a placed object is: a move from another group is refused at
// submission, naming the group, instead of submitting a job whose task fails on the source
// with "does not exist". A table goes with its schema's placement unless placed apart.
func TestStartRefusesAMoveFromWhereTheCatalogDoesNotPlaceIt(t *testing.T) {
	e := newMoveEnv(t)
	placer := e.submit(move.Request{Schema: "placed", From: "g1", To: "g2"}) // no worker: never runs
	if _, err := e.Client.Cancel(ctx, placer); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Catalog().SwitchPlacement(ctx, placer, []deckhandtype.PlacedObject{{Schema: "placed"}}, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Catalog().SwitchPlacement(ctx, placer, []deckhandtype.PlacedObject{{Schema: "split", Table: "t"}}, "g2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  move.Request
		want string
	}{
		{move.Request{Schema: "placed"}, "schema placed is on group g2 (moved there by job"},
		{move.Request{Tables: []string{"placed.t"}}, "schema placed is on group g2"},
		{move.Request{Schema: "split"}, "table split.t is on group g2"},
		{move.Request{Tables: []string{"split.t"}}, "table split.t is on group g2"},
	} {
		tc.req.From, tc.req.To, tc.req.Owner = "g1", "g2", e.owner
		id, err := move.Start(ctx, e.Client, tc.req)
		if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not g1") {
			t.Errorf("Start(%+v) = job %d, %v; want refused as bad input with %q", tc.req, id, err, tc.want)
		}
	}
	// From where the catalog places it, and for what it does not place, a move is submitted.
	for _, req := range []move.Request{
		{Schema: "placed", From: "g2", To: "g1"},
		{Tables: []string{"split.u"}, From: "g1", To: "g2"},
		{Schema: "unplaced", From: "g1", To: "g2"},
	} {
		req.Owner = e.owner
		id, err := move.Start(ctx, e.Client, req)
		if err != nil {
			t.Errorf("Start(%+v): %v", req, err)
			continue
		}
		if _, err := e.Client.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// A node removed from the catalog while a move to it runs (`deckhand node remove`, say to
// decommission it) is no place to switch to: the move fails rather than place the schema on a
// group with no node and drop the source. The source is where the data stays: once the
// cleaner ran, it takes writes again, and the placements are as before (none).
func TestMoveFailsWhenItsTargetNodeIsRemoved(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	var once sync.Once
	e.worker(move.Mover{AfterStep: func(ctx context.Context, step string) error {
		if step == move.StepCutOver {
			once.Do(func() {
				if err := e.Client.RemoveNode(ctx, "dst"); err != nil {
					t.Error(err)
				}
			})
		}
		return nil
	}})
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	e.FailedWith(id, "node dst", "no longer registered")
	e.cleanupRun()
	if !e.schemaExists(e.src, "app") {
		t.Fatal("the source schema was dropped")
	}
	e.asOwner(e.src, `INSERT INTO app.notes VALUES (100000, 'after the failed move')`)
	if placed, moving := e.placementsNow(); len(placed) != 0 || len(moving) != 0 {
		t.Errorf("placements after the failed move: %+v, moves under way: %+v", placed, moving)
	}
}
