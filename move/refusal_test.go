package move_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// A move that cannot be done is refused with a one-line reason, before anything is created on
// either node or registered with the cleaner.
func TestMoveRefusals(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `
		CREATE SCHEMA nokey; CREATE TABLE nokey.t (x int);
		CREATE SCHEMA unlogged; CREATE UNLOGGED TABLE unlogged.t (id int PRIMARY KEY);
		CREATE SCHEMA ruled; CREATE TABLE ruled.t (id int PRIMARY KEY);
		CREATE RULE r AS ON INSERT TO ruled.t WHERE new.id < 0 DO INSTEAD NOTHING;
		CREATE SCHEMA other; CREATE TABLE other.t (id int PRIMARY KEY);
		CREATE SCHEMA viewing; CREATE TABLE viewing.t (id int PRIMARY KEY);
		CREATE VIEW viewing.v AS SELECT * FROM other.t;
		CREATE SCHEMA viewed; CREATE TABLE viewed.t (id int PRIMARY KEY);
		CREATE VIEW other.v AS SELECT * FROM viewed.t;
		CREATE SCHEMA keyed; CREATE TABLE keyed.t (id int PRIMARY KEY);
		CREATE TABLE other.r (id int REFERENCES keyed.t (id));
		CREATE SCHEMA matv; CREATE TABLE matv.t (id int PRIMARY KEY); CREATE MATERIALIZED VIEW matv.m AS SELECT * FROM matv.t;
		CREATE SCHEMA taken; CREATE TABLE taken.t (id int PRIMARY KEY);
		CREATE SCHEMA busy; CREATE TABLE busy.t (id int PRIMARY KEY);`)
	e.asOwner(e.dst, `CREATE SCHEMA taken`)
	// A group whose primary runs wal_level = replica: a database of the shared cluster.
	shared := testenv.Database(t, e.Cluster, "replica")
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "plain", DSN: e.Cluster.DSN(shared, pgcluster.Superuser), Group: "g3", MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	e.Exec(shared, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY)`)

	// Something another live job is moving: refused at submission, and by the task.
	holder := e.submit(move.Request{Schema: "busy", From: "g1", To: "g2"}) // no worker yet: stays runnable
	if err := e.Client.Catalog().BeginMove(ctx, holder, []deckhandtype.PlacedObject{{Schema: "busy"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	if _, err := move.Start(ctx, e.Client, move.Request{Schema: "busy", From: "g1", To: "g2", Owner: e.owner}); err == nil ||
		!engine.IsInvalid(err) || !strings.Contains(err.Error(), "already being moved by job") {
		t.Errorf("Start of a move of a schema being moved: %v", err)
	}
	if _, err := e.Client.Cancel(ctx, holder); err != nil {
		t.Fatal(err)
	}

	preSrc := e.Snapshot(e.src)
	preDst := e.Snapshot(e.dst)
	cases := []struct {
		req  move.Request
		want string
	}{
		{move.Request{Schema: "nokey"}, `table nokey.t has no primary key or replica identity index`},
		{move.Request{Schema: "unlogged"}, `unlogged.t is an unlogged table`},
		{move.Request{Schema: "ruled"}, `ruled.t has rules`},
		{move.Request{Schema: "viewing"}, `view viewing.v of the moved schema depends on other.t, which stays`},
		{move.Request{Schema: "viewed"}, `view other.v depends on moved table viewed.t`},
		{move.Request{Schema: "keyed"}, `foreign key r_id_fkey of other.r references keyed.t across the move`},
		{move.Request{Schema: "matv"}, `matv.m is a materialized view`},
		{move.Request{Schema: "taken"}, `the target (node dst) already has schema taken`},
		{move.Request{Schema: "ghost"}, `schema ghost does not exist on the source`},
		{move.Request{Tables: []string{"busy.t"}}, `table busy.t is being moved by job`},
		{move.Request{Schema: "app", From: "g3", Owner: pgcluster.Superuser}, `wal_level is replica on the source, and a move needs logical`},
	}
	ids := make([]int64, len(cases))
	for i := range cases {
		if cases[i].req.From == "" {
			cases[i].req.From = "g1"
		}
		cases[i].req.To = "g2"
		ids[i] = e.submit(cases[i].req)
	}
	// The holder's cancellation ends its marks only through EndMove. Another live job marks
	// busy.t before the move above begins (as a failed move of it, retried meanwhile, would):
	// the task's own check refuses the move above. That job is paused, so that it stays live.
	other := e.Submit(&spec.Job{Tasks: []spec.Task{{Name: "hold", Kind: spec.KindNoop}}})
	if _, err := e.Client.Pause(ctx, other, false); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Catalog().BeginMove(ctx, other, []deckhandtype.PlacedObject{{Schema: "busy", Table: "t"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	e.worker(move.Mover{})
	for i, c := range cases {
		job := e.Wait(ids[i], time.Minute)
		msg := e.lastError(ids[i])
		if job.State != deckhandtype.JobFailed || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: job %s, error %q; want one line with %q", c.req.Describe(), job.State, msg, c.want)
		}
		if recs := e.Records(ids[i]); len(recs) != 0 {
			t.Errorf("%s: registered %d resources", c.req.Describe(), len(recs))
		}
	}
	if d := testenv.Diff(preSrc, e.Snapshot(e.src)); d != "" {
		t.Errorf("the refused moves changed the source:\n%s", d)
	}
	if d := testenv.Diff(preDst, e.Snapshot(e.dst)); d != "" {
		t.Errorf("the refused moves changed the target:\n%s", d)
	}
}

// A move whose submitter was forged in the catalog (see testenv.Env.ForgeSubmitter) is
// refused on the node, before anything is created or registered: the worker checks that the
// submitter is a member of the owner in every session it opens.
func TestForgedMoveIsRefused(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	outsider := e.owner + "_outsider"
	if err := e.NodeCluster.CreateRole(ctx, outsider, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.NodeCluster.Exec(ctx, "postgres", "DROP ROLE IF EXISTS "+outsider) })
	preSrc, preDst := e.Snapshot(e.src, appTables...), e.Snapshot(e.dst)
	id := e.submit(move.Request{Schema: "app", From: "g1", To: "g2"})
	e.ForgeSubmitter(id, outsider)
	e.worker(move.Mover{})
	e.FailedWith(id, fmt.Sprintf("submitter %q is not a member of role %q", outsider, e.owner))
	if recs := e.Records(id); len(recs) != 0 {
		t.Errorf("the refused move registered resources: %+v", recs)
	}
	if d := testenv.Diff(preSrc, e.Snapshot(e.src, appTables...)); d != "" {
		t.Errorf("the refused move changed the source:\n%s", d)
	}
	if d := testenv.Diff(preDst, e.Snapshot(e.dst)); d != "" {
		t.Errorf("the refused move changed the target:\n%s", d)
	}
}

// `deckhand move` prints the job id alone; bad input is refused with exit code 2 and one line.
func TestMoveCommand(t *testing.T) {
	e := newMoveEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"move", "--schema", "app", "--from", "g1"}, "--to is required"},
		{[]string{"move", "--schema", "app", "--from", "g1", "--to", "g1"}, "--from and --to are both group g1"},
		{[]string{"move", "--schema", "app", "--table", "t", "--from", "g1", "--to", "g2"}, "not both"},
		{[]string{"move", "--schema", "app", "--from", "g1", "--to", "nowhere"}, `node group "nowhere" has no nodes`},
		{[]string{"move", "--schema", "app", "--from", "g1", "--to", "g2", "--max-write-block", "1us"}, "--max-write-block must be at least"},
	} {
		code, stdout, stderr := clitest.Deckhand(t, e.DSN, tc.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("deckhand %s: exit %d, stdout %q, stderr %q; want 2 and one line with %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
	out := clitest.Run(t, e.DSN, "move", "--schema", "app", "--from", "g1", "--to", "g2", "--owner", e.owner)
	if id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil || id <= 0 {
		t.Errorf("deckhand move printed %q, want a job id", out)
	}
}

// A move task names no node, so the owner check that Submit makes on each task's node had
// nothing to check: a submitter who may not act as the owner got a job that failed on the
// node. The move kind's submission check makes it on the groups' primaries, for `deckhand
// move` and for a job spec with a move task alike: refused as bad input, nothing written.
func TestSubmissionChecksTheSubmitterMayActAsTheOwner(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	outsider, c := e.Submitter("outsider")
	if err := e.NodeCluster.CreateRole(ctx, outsider, ""); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.NodeCluster.Exec(ctx, "postgres", "DROP ROLE IF EXISTS "+outsider) })
	before, err := e.Client.Jobs(ctx, deckhandtype.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	req := move.Request{Schema: "app", From: "g1", To: "g2", Owner: e.owner}
	task, err := req.Task("relocate")
	if err != nil {
		t.Fatal(err)
	}
	asSpec := func() (int64, error) {
		return c.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "first", Kind: spec.KindNoop}, task}})
	}
	// The refusal names the move task: "move" for move.Start, the spec's own name for a spec.
	for name, submit := range map[string]func() (int64, error){
		"move":     func() (int64, error) { return move.Start(ctx, c, req) },
		"relocate": asSpec,
	} {
		id, err := submit()
		if err == nil || !engine.IsInvalid(err) ||
			!strings.Contains(err.Error(), fmt.Sprintf("submitter %q is not a member of role %q", outsider, e.owner)) {
			t.Errorf("task %s by a submitter who is not a member of the owner = job %d, %v; want refused as bad input", name, id, err)
		} else if !strings.HasPrefix(err.Error(), fmt.Sprintf("task %q: ", name)) {
			t.Errorf("task %s: the refusal %q does not name the task", name, err)
		}
	}
	after, err := e.Client.Jobs(ctx, deckhandtype.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the refused moves wrote jobs: %d jobs before, %d after", len(before), len(after))
	}
}

// A job spec's move task is refused at submission for what `deckhand move` is refused for,
// the task named: a group with no nodes, a --from that is not where the object is, an object
// a live job already moves.
func TestJobSpecMoveIsCheckedAtSubmission(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, appSchema)
	submit := func(r move.Request) (int64, error) {
		task, err := r.Task("relocate")
		if err != nil {
			t.Fatal(err)
		}
		return e.Client.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "first", Kind: spec.KindNoop}, task}})
	}
	first, err := submit(move.Request{Schema: "app", From: "g1", To: "g2", Owner: e.owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Catalog().BeginMove(ctx, first, []deckhandtype.PlacedObject{{Schema: "app"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  move.Request
		want string
	}{
		{move.Request{Schema: "app", From: "g1", To: "nowhere", Owner: e.owner}, `task "relocate": node group "nowhere" has no nodes`},
		{move.Request{Tables: []string{"app.orders"}, From: "g1", To: "g2", Owner: e.owner},
			fmt.Sprintf(`task "relocate": table app.orders is already being moved by job %d`, first)},
		{move.Request{Schema: "app", From: "g2", To: "g1", Owner: e.owner}, `task "relocate": schema app is`},
	} {
		if id, err := submit(tc.req); err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Submit of %s = job %d, %v; want refused as bad input with %q", tc.req.Describe(), id, err, tc.want)
		}
	}
}
