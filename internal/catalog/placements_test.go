package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// placementCatalog is a migrated catalog, opened as a worker (who writes placements) and as a
// submitter who was granted every privilege on the placement table by mistake.
type placementCatalog struct {
	admin, worker, submitter *catalog.Catalog
	submitterRole            string
}

func newPlacementCatalog(t *testing.T) *placementCatalog {
	t.Helper()
	cat, cl, db := emptyCatalog(t)
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p := &placementCatalog{admin: cat}
	open := func(role, grant string) *catalog.Catalog { return openAs(t, cl, db, role, grant) }
	p.worker = open("placer_"+db, "deckhand_worker")
	p.submitterRole = "router_" + db
	p.submitter = open(p.submitterRole, "deckhand_submitter")
	q := pgx.Identifier{p.submitterRole}.Sanitize()
	if err := cl.Exec(ctx, db, `GRANT ALL ON deckhand.placement TO `+q+`; GRANT ALL ON ALL SEQUENCES IN SCHEMA deckhand TO `+q); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *placementCatalog) job(t *testing.T, state JobState) int64 {
	t.Helper()
	return ct.Job(ctx, t, p.admin.Pool, &ct.JobOpts{State: state}).ID
}

func schemaObj(s string) PlacedObject       { return PlacedObject{Schema: s} }
func tableObj(s, tbl string) PlacedObject   { return PlacedObject{Schema: s, Table: tbl} }
func objs(o ...PlacedObject) []PlacedObject { return o }
func placementKey(p Placement) string       { return p.Schema + "." + deref(p.Table) }
func deref[T any](p *T) (v T) {
	if p != nil {
		v = *p
	}
	return v
}

// placementsOf reads the view as role c, keyed schema.table.
func placementsOf(t *testing.T, c *catalog.Catalog) map[string]Placement {
	t.Helper()
	ps, err := c.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Placement{}
	for _, p := range ps {
		out[placementKey(p)] = p
	}
	return out
}

// movesOf reads deckhand.placement_moves as role c, keyed schema.table.
func movesOf(t *testing.T, c *catalog.Catalog) map[string]PlacementMove {
	t.Helper()
	ms, err := c.MovesUnderWay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]PlacementMove{}
	for _, m := range ms {
		out[m.Schema+"."+deref(m.Table)] = m
	}
	return out
}

// rows counts the rows of deckhand.placement, marks alone included, for schema s.
func (p *placementCatalog) rows(t *testing.T, s string) int {
	t.Helper()
	var n int
	if err := p.admin.Pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.placement WHERE schema_name = $1`, s).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// version is the version of the row of deckhand.placement of schema s (table NULL).
func (p *placementCatalog) version(t *testing.T, s string) int64 {
	t.Helper()
	var v int64
	if err := p.admin.Pool.QueryRow(ctx, `SELECT version FROM deckhand.placement WHERE schema_name = $1 AND table_name IS NULL`, s).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A move marks what it moves; another live job's move of the same object, its schema or one of
// its tables is refused naming that job; the same job's retried BeginMove is accepted; the
// switch places the objects on the target, by the job, and frees them. A mark is no
// placement: deckhand.placements shows an object only once a switch placed it, and a move
// that ends without one leaves none.
func TestBeginMoveRefusesAnotherJobAndIsIdempotent(t *testing.T) {
	p := newPlacementCatalog(t)
	w := p.worker
	a, b := p.job(t, JobRunning), p.job(t, JobRunning)

	if err := w.BeginMove(ctx, a, objs(schemaObj("t1"), tableObj("t2", "orders")), "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	if got := placementsOf(t, p.submitter); len(got) != 0 {
		t.Errorf("BeginMove placed something: %+v", got)
	}
	if got := movesOf(t, p.submitter)["t1."]; got.JobID != a || got.To != "g2" {
		t.Errorf("t1 after BeginMove: %+v", got)
	}
	// Retried by the same job: accepted, nothing rewritten.
	begun := p.version(t, "t1")
	if err := w.BeginMove(ctx, a, objs(schemaObj("t1"), tableObj("t2", "orders")), "g1", "g2"); err != nil {
		t.Errorf("BeginMove retried by the same job: %v", err)
	}
	if again := p.version(t, "t1"); again != begun {
		t.Errorf("retried BeginMove rewrote t1: version %d → %d", begun, again)
	}
	for _, tc := range []struct {
		name string
		o    PlacedObject
		want string
	}{
		{"the same schema", schemaObj("t1"), "schema t1 is being moved by job " + strconv.FormatInt(a, 10)},
		{"a table of a schema moved whole", tableObj("t1", "x"), "schema t1 is being moved by job " + strconv.FormatInt(a, 10)},
		{"the schema of a moved table", schemaObj("t2"), "table t2.orders is being moved by job " + strconv.FormatInt(a, 10)},
		{"the same table", tableObj("t2", "orders"), "table t2.orders is being moved by job " + strconv.FormatInt(a, 10)},
	} {
		err := w.BeginMove(ctx, b, objs(schemaObj("free"), tc.o), "g1", "g3")
		var moving *catalog.AlreadyMovingError
		if !errors.Is(err, catalog.ErrAlreadyMoving) || !errors.As(err, &moving) || moving.JobID != a || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: BeginMove by job %d: %v, want %q", tc.name, b, err, tc.want)
		}
	}
	// The refusals marked nothing, not even the free schema listed before the conflict.
	if _, marked := movesOf(t, p.submitter)["free."]; marked || p.rows(t, "free") != 0 {
		t.Error("a refused BeginMove left a mark")
	}
	// Another table of t2 is free.
	if err := w.BeginMove(ctx, b, objs(tableObj("t2", "items")), "g1", "g3"); err != nil {
		t.Errorf("another table of t2: %v", err)
	}

	// A mark of a job that ended holds nothing: the view shows none, and another job may move it.
	ended := p.job(t, JobFailed)
	if err := w.BeginMove(ctx, ended, objs(schemaObj("t3")), "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	if got, ok := movesOf(t, p.submitter)["t3."]; ok {
		t.Errorf("t3 marked by ended job %d shows moving: %+v", ended, got)
	}
	if got, ok := placementsOf(t, p.submitter)["t3."]; ok {
		t.Errorf("t3 marked by ended job %d shows placed: %+v", ended, got)
	}
	if err := w.BeginMove(ctx, b, objs(schemaObj("t3")), "g1", "g2"); err != nil {
		t.Errorf("t3 after its mover ended: %v", err)
	}

	// The switch, then the same again.
	for range 2 {
		if err := w.SwitchPlacement(ctx, a, objs(schemaObj("t1"), tableObj("t2", "orders")), "g2"); err != nil {
			t.Fatal(err)
		}
	}
	after := placementsOf(t, p.submitter)
	for _, k := range []string{"t1.", "t2.orders"} {
		if got := after[k]; got.Group != "g2" || deref(got.JobID) != a || got.MovingJobID != nil || got.MovingTo != nil || got.Since.IsZero() {
			t.Errorf("%s after the switch: %+v", k, got)
		}
		if got, ok := movesOf(t, p.submitter)[k]; ok {
			t.Errorf("%s still moving after the switch: %+v", k, got)
		}
	}
	// BeginMove retried after the switch: accepted, nothing marked again.
	if err := w.BeginMove(ctx, a, objs(schemaObj("t1")), "g1", "g2"); err != nil || placementsOf(t, p.submitter)["t1."].MovingJobID != nil {
		t.Errorf("BeginMove retried after the switch: %v, %+v", err, placementsOf(t, p.submitter)["t1."])
	}
	// A move of a placed object marks its placement, which stays where it is; ending the move
	// clears the mark alone.
	c := p.job(t, JobRunning)
	if err := w.BeginMove(ctx, c, objs(schemaObj("t1")), "g2", "g4"); err != nil {
		t.Fatal(err)
	}
	if got := placementsOf(t, p.submitter)["t1."]; got.Group != "g2" || deref(got.JobID) != a || deref(got.MovingJobID) != c || deref(got.MovingTo) != "g4" {
		t.Errorf("t1 placed on g2 and being moved by job %d: %+v", c, got)
	}
	if err := w.EndMove(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := placementsOf(t, p.submitter)["t1."]; got.Group != "g2" || deref(got.JobID) != a || got.MovingJobID != nil || !got.Since.Equal(after["t1."].Since) {
		t.Errorf("t1 after job %d's move of it ended: %+v", c, got)
	}
	// Moving t1 on now starts from g2, where it is; from g1 is refused.
	if err := w.BeginMove(ctx, b, objs(schemaObj("t1")), "g1", "g3"); !errors.Is(err, catalog.ErrPlacedElsewhere) {
		t.Errorf("BeginMove from where t1 no longer is: %v", err)
	}
	// Switching what the job did not mark is refused.
	if err := w.SwitchPlacement(ctx, a, objs(schemaObj("t3")), "g2"); !errors.Is(err, catalog.ErrAlreadyMoving) {
		t.Errorf("switching t3, which job %d moves: %v", b, err)
	}
	// A switch records what happened: a schema nobody marks is placed all the same.
	if err := w.SwitchPlacement(ctx, a, objs(schemaObj("unmarked")), "g2"); err != nil {
		t.Errorf("switching an unmarked schema: %v", err)
	}
	if got := placementsOf(t, p.submitter)["unmarked."]; got.Group != "g2" || deref(got.JobID) != a {
		t.Errorf("unmarked schema after its switch: %+v", got)
	}

	// EndMove with objects frees those only (a rebalance's failed move leaves its siblings'
	// marks); without, all of the job's. The objects stay where they are.
	if err := w.EndMove(ctx, b, tableObj("t2", "items")); err != nil {
		t.Fatal(err)
	}
	if got := movesOf(t, p.submitter); len(got) != 1 || got["t3."].JobID != b {
		t.Errorf("after EndMove of t2.items, the moves under way: %+v, want t3's alone", got)
	}
	if err := w.EndMove(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := movesOf(t, p.submitter); len(got) != 0 {
		t.Errorf("moves under way after EndMove: %+v", got)
	}
	// What no switch placed is not placed after its move ended, and no row of it is left.
	got := placementsOf(t, p.submitter)
	for _, k := range []string{"t2.items", "t3."} {
		if pl, ok := got[k]; ok {
			t.Errorf("%s placed after its move ended: %+v", k, pl)
		}
	}
	if n := p.rows(t, "t3"); n != 0 {
		t.Errorf("%d rows of t3 left after its move ended", n)
	}
}

// A schema moved whole takes its tables' own rows; a schema whose table the catalog places on
// another group cannot be moved from the schema's group as a whole.
func TestSwitchOfASchemaTakesItsTables(t *testing.T) {
	p := newPlacementCatalog(t)
	w := p.worker
	a, b, c := p.job(t, JobRunning), p.job(t, JobRunning), p.job(t, JobRunning)
	if err := w.BeginMove(ctx, a, objs(tableObj("s", "big")), "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	if err := w.SwitchPlacement(ctx, a, objs(tableObj("s", "big")), "g2"); err != nil {
		t.Fatal(err)
	}
	if err := w.BeginMove(ctx, b, objs(schemaObj("s")), "g1", "g3"); !errors.Is(err, catalog.ErrPlacedElsewhere) ||
		!strings.Contains(err.Error(), "table s.big is on group g2, not g1") {
		t.Errorf("moving s while s.big is on g2: %v", err)
	}
	if err := w.BeginMove(ctx, c, objs(tableObj("s", "big")), "g2", "g1"); err != nil {
		t.Fatal(err)
	}
	if err := w.SwitchPlacement(ctx, c, objs(tableObj("s", "big")), "g1"); err != nil {
		t.Fatal(err)
	}
	if err := w.BeginMove(ctx, b, objs(schemaObj("s")), "g1", "g3"); err != nil {
		t.Fatal(err)
	}
	if err := w.SwitchPlacement(ctx, b, objs(schemaObj("s")), "g3"); err != nil {
		t.Fatal(err)
	}
	got := placementsOf(t, p.submitter)
	if len(got) != 1 || got["s."].Group != "g3" {
		t.Errorf("placements after s moved whole: %+v", got)
	}
}

// Every placement change is announced on deckhand_placement with the highest version, which
// the view shows; the payload names no schema, table, group or job.
func TestSwitchPlacementNotifies(t *testing.T) {
	p := newPlacementCatalog(t)
	job := p.job(t, JobRunning)
	listener, err := p.submitter.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+catalog.ChannelPlacement); err != nil {
		t.Fatal(err)
	}
	next := func(what string) string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("%s: no notification: %v", what, err)
		}
		return n.Payload
	}
	if err := p.worker.BeginMove(ctx, job, objs(schemaObj("tenant_secret")), "g_alpha", "g_beta"); err != nil {
		t.Fatal(err)
	}
	begun := next("BeginMove")
	if err := p.worker.SwitchPlacement(ctx, job, objs(schemaObj("tenant_secret")), "g_beta"); err != nil {
		t.Fatal(err)
	}
	switched := next("SwitchPlacement")
	view := placementsOf(t, p.submitter)["tenant_secret."]
	if switched != strconv.FormatInt(view.Version, 10) || begun == switched {
		t.Errorf("payloads %q then %q, view version %d", begun, switched, view.Version)
	}
	for _, payload := range []string{begun, switched} {
		for _, name := range []string{"tenant_secret", "g_alpha", "g_beta", strconv.FormatInt(job, 10) + ","} {
			if strings.Contains(payload, name) {
				t.Errorf("payload %q names %q", payload, name)
			}
		}
	}
}

// Placements are written only by workers: a submitter holding every table privilege by mistake
// is refused by guard_writes, and can still read the view.
func TestPlacementsAreWrittenOnlyByWorkers(t *testing.T) {
	p := newPlacementCatalog(t)
	job := p.job(t, JobRunning)
	if err := p.worker.SwitchPlacement(ctx, job, objs(schemaObj("t")), "g1"); err != nil {
		t.Fatal(err)
	}
	if err := p.worker.BeginMove(ctx, job, objs(schemaObj("m")), "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`INSERT INTO deckhand.placement (schema_name, node_group) VALUES ('evil', 'g9')`,
		`UPDATE deckhand.placement SET node_group = 'g9'`,
		`DELETE FROM deckhand.placement`,
		`TRUNCATE deckhand.placement`,
	} {
		_, err := p.submitter.Pool.Exec(ctx, stmt)
		if err == nil || !strings.Contains(err.Error(), "may not write deckhand.placement directly") {
			t.Errorf("%s as a submitter: %v, want guard_writes' refusal", stmt, err)
		}
	}
	// Through the API as well: the statements are refused, not the role's whim.
	if err := p.submitter.BeginMove(ctx, job+1, objs(schemaObj("u")), "g1", "g2"); err == nil {
		t.Error("a submitter's BeginMove was accepted")
	}
	got := placementsOf(t, p.submitter)
	if len(got) != 1 || got["t."].Group != "g1" || deref(got["t."].JobID) != job {
		t.Errorf("placements after the refused writes: %+v", got)
	}
	if moving := movesOf(t, p.submitter); len(moving) != 1 || moving["m."].JobID != job {
		t.Errorf("moves under way after the refused writes: %+v", moving)
	}
	// A role without catalog access reads nothing.
	cl := pgtest.Shared(t)
	outsider := "outsider_" + strconv.FormatInt(job, 10) + "_" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	if err := pgtest.CreateLoginRole(ctx, cl, outsider, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{outsider}.Sanitize()) //nolint:errcheck
	})
	db := p.admin.Pool.Config().ConnConfig.Database
	conn := pgtest.Connect(t, cl.DSN(db, outsider))
	for _, view := range []string{"deckhand.placements", "deckhand.placement_moves"} {
		if _, err := conn.Exec(ctx, `SELECT * FROM `+view); err == nil {
			t.Errorf("a role without catalog access read %s", view)
		}
	}
}

// Moves that begin at the same moment see one another: of ten jobs marking the same schema
// at once, exactly one succeeds and the others are refused naming it.
func TestConcurrentBeginMovesOneWins(t *testing.T) {
	p := newPlacementCatalog(t)
	jobs := make([]int64, 10)
	for i := range jobs {
		jobs[i] = p.job(t, JobRunning)
	}
	errs := make(chan error, len(jobs))
	start := make(chan struct{})
	for _, j := range jobs {
		go func() {
			<-start
			errs <- p.worker.BeginMove(ctx, j, objs(schemaObj("contested")), "g1", "g2")
		}()
	}
	close(start)
	won := 0
	for range jobs {
		if err := <-errs; err == nil {
			won++
		} else if !errors.Is(err, catalog.ErrAlreadyMoving) {
			t.Errorf("a concurrent BeginMove: %v", err)
		}
	}
	got := movesOf(t, p.submitter)["contested."]
	if won != 1 || got.JobID == 0 {
		t.Errorf("%d of %d concurrent BeginMoves succeeded; move under way %+v", won, len(jobs), got)
	}
}

// deckhand.rebalance_moves shows a rebalance's moves with their planned bytes to those who may
// act on its job, and nothing to others; a payload whose bytes are not a count reads as 0
// rather than failing every reader.
func TestRebalanceMovesView(t *testing.T) {
	p := newPlacementCatalog(t)
	var jobID int64
	err := p.admin.Pool.QueryRow(ctx, `INSERT INTO deckhand.job (kind, owners, tasks_total, tasks_done, started_at)
		VALUES ('rebalance', '{app}', 4, 1, now()) RETURNING id`).Scan(&jobID)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []struct{ state, payload string }{
		{"done", `{"schema": "a", "from": "g1", "to": "g2", "bytes": 1000}`},
		{"running", `{"schema": "b", "from": "g1", "to": "g3", "bytes": 300}`},
		{"blocked", `{"schema": "c", "from": "g2", "to": "g3", "bytes": "lots"}`},
		{"runnable", `[1, 2]`},
	} {
		_, err := p.admin.Pool.Exec(ctx, `INSERT INTO deckhand.task (job_id, name, kind, owner, payload, max_attempts, timeout, state)
			VALUES ($1, $2, 'move', 'app', $3, 3, '1 hour', $4)`, jobID, fmt.Sprintf("move-%d", i+1), m.payload, m.state)
		if err != nil {
			t.Fatal(err)
		}
	}
	job := struct{ ID int64 }{jobID}
	// The catalog's owner submitted it: its own rebalance.
	s, err := p.admin.LatestRebalance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.JobID != job.ID || len(s.Moves) != 4 || s.Done != (MoveCount{Moves: 1, Bytes: 1000}) || s.Running != (MoveCount{Moves: 1, Bytes: 300}) ||
		s.Left != (MoveCount{Moves: 2}) || s.Moves[0].Schema != "a" || s.Moves[1].To != "g3" || s.Moves[3].Schema != "" {
		t.Errorf("status: %+v", s)
	}
	if id, err := p.admin.UnfinishedRebalance(ctx); err != nil || id != job.ID {
		t.Errorf("unfinished rebalance: %d, %v", id, err)
	}
	// Neither the worker nor the submitter submitted it: not their rebalance.
	if id, err := p.worker.UnfinishedRebalance(ctx); err != nil || id != 0 {
		t.Errorf("the worker's unfinished rebalance: %d, %v", id, err)
	}
	if _, err := p.submitter.LatestRebalance(ctx); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("another submitter's status: %v", err)
	}
	if id, err := p.submitter.UnfinishedRebalance(ctx); err != nil || id != 0 {
		t.Errorf("another submitter's unfinished rebalance: %d, %v", id, err)
	}
}

// Upgrading a catalog whose moves recorded their objects where they found them when they
// began (before placements were written only by a switch): those rows are no placements. A
// mark of a move under way stays a mark (no placement), the others go; placements a switch
// made stay as they were.
func TestMigrationKeepsOnlySwitchedPlacements(t *testing.T) {
	cat, _, _ := emptyCatalog(t)
	if _, err := cat.MigrateTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	live := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{State: JobRunning}).ID
	ended := ct.Job(ctx, t, cat.Pool, &ct.JobOpts{State: JobFailed}).ID
	_, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.placement (schema_name, table_name, node_group, job_id, moving_job_id, moving_to) VALUES
			('switched', NULL, 'g2', $2, NULL, NULL),            -- placed by a switch
			('switched_moving', NULL, 'g2', $2, $1, 'g3'),       -- placed, and being moved
			('found_moving', NULL, 'g1', NULL, $1, 'g2'),        -- recorded where a live move began
			('found_failed', NULL, 'g1', NULL, $2, 'g2'),        -- recorded where a failed move began
			('found_left', 'orders', 'g1', NULL, NULL, NULL)     -- recorded, mark cleared`, live, ended)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got := placementsOf(t, cat)
	if len(got) != 2 || got["switched."].Group != "g2" || deref(got["switched."].JobID) != ended ||
		got["switched_moving."].Group != "g2" || deref(got["switched_moving."].MovingJobID) != live {
		t.Errorf("placements after the upgrade: %+v", got)
	}
	moving := movesOf(t, cat)
	if len(moving) != 2 || moving["switched_moving."].JobID != live || moving["found_moving."].JobID != live || moving["found_moving."].To != "g2" {
		t.Errorf("moves under way after the upgrade: %+v", moving)
	}
	// Only a switch places: a mark alone ends with its move, and the move's switch places it.
	if err := cat.SwitchPlacement(ctx, live, objs(schemaObj("found_moving")), "g2"); err != nil {
		t.Fatal(err)
	}
	if got := placementsOf(t, cat)["found_moving."]; got.Group != "g2" || deref(got.JobID) != live || got.MovingJobID != nil {
		t.Errorf("found_moving after its switch: %+v", got)
	}
}
