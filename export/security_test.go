package export_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parquet-go/parquet-go"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// single is a catalog with one node, n1 (its own group), on the shared cluster.
func single(t *testing.T) (*testenv.Env, string) {
	t.Helper()
	e := testenv.New(t, export.Feature())
	db := e.AddNode("n1", 4)
	e.Exec(db, `CREATE TABLE facts (id bigint NOT NULL); INSERT INTO facts SELECT g FROM generate_series(1, 2000) g`)
	return e, db
}

func waitJob(t *testing.T, e *testenv.Env, jobID int64, want deckhandtype.JobState) {
	t.Helper()
	if job := e.Wait(jobID, 60*time.Second); job.State != want {
		d, _ := e.Client.Job(ctx, jobID)
		t.Fatalf("job %d is %s, want %s: %+v", jobID, job.State, want, d.Tasks)
	}
}

func jobErrors(t *testing.T, e *testenv.Env, jobID int64) string {
	t.Helper()
	d, err := e.Client.Job(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, task := range d.Tasks {
		if task.LastError != nil {
			msgs = append(msgs, task.LastError.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error { //nolint:errcheck
		if err == nil && !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// file:///x/./exp, file:///x//exp/ and file:///x/exp are one place: a second export there is
// refused without --force, and a forced one supersedes the first when it commits.
func TestExportDestinationSpellingsAreOnePlace(t *testing.T) {
	e, _ := single(t)
	e.Worker(engine.Config{Concurrency: 4})
	dir := t.TempDir()
	first, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir + "/./exp"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Destination != "file://"+dir+"/exp" {
		t.Errorf("destination stored as %q, want its normal form file://%s/exp", first.Destination, dir)
	}
	waitJob(t, e, first.JobID, deckhandtype.JobFinished)

	_, err = export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir + "//exp/"})
	if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second export to another spelling of the place: err = %v, want a refusal naming --force", err)
	}
	forced, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir + "/exp", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, forced.JobID, deckhandtype.JobFinished)
	if m := readManifest(t, dir+"/exp"); m.ExportID != forced.ID {
		t.Errorf("the manifest is export %d's, want the forced export %d's", m.ExportID, forced.ID)
	}
	if got, _ := e.Client.Export(ctx, first.ID); got == nil || got.State != deckhandtype.ExportSuperseded {
		t.Errorf("the first export is %+v, want superseded", got)
	}
}

// A destination whose store holds a manifest holds an export, whatever the catalog says: an
// export there fails before writing anything, unless forced.
func TestExportRefusesToOverwriteAManifest(t *testing.T) {
	e, _ := single(t)
	e.Worker(engine.Config{Concurrency: 4})
	dir := t.TempDir()
	earlier := []byte(`{"format": "deckhand-export/1", "export_id": 1, "files": []}` + "\n")
	if err := os.WriteFile(filepath.Join(dir, export.ManifestKey), earlier, 0o644); err != nil {
		t.Fatal(err)
	}
	x, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir})
	if err != nil {
		t.Fatalf("the catalog knows no export there, so the submission passes: %v", err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFailed)
	if msg := jobErrors(t, e, x.JobID); !strings.Contains(msg, "already holds an export") || !strings.Contains(msg, "--force") {
		t.Errorf("error %q, want it to say the destination holds an export and name --force", msg)
	}
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("the refused export left %v, want only the earlier manifest", got)
	}
	if body, _ := os.ReadFile(filepath.Join(dir, export.ManifestKey)); string(body) != string(earlier) {
		t.Errorf("the earlier manifest was changed: %s", body)
	}

	forced, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, forced.JobID, deckhandtype.JobFinished)
	if m := readManifest(t, dir); m.ExportID != forced.ID || m.TotalRows != 2000 {
		t.Errorf("after the forced export the manifest is export %d's with %d rows", m.ExportID, m.TotalRows)
	}
}

// Submitters export only under the prefixes of the setting export_destinations (none by
// default); admins anywhere; ".." nobody. The catalog checks the normal form itself, so a
// client that skips normalization gains nothing.
func TestExportDestinationsOfSubmitters(t *testing.T) {
	e, db := single(t)
	alice := e.Role("alice")
	admin := e.Role("admin")
	e.Exec("postgres", `GRANT deckhand_submitter TO `+pgx.Identifier{alice}.Sanitize()+`;
		GRANT deckhand_admin TO `+pgx.Identifier{admin}.Sanitize())
	// Each may export the table as itself: what is refused here is only where to.
	e.Exec(db, `GRANT SELECT, UPDATE ON facts TO `+pgx.Identifier{alice}.Sanitize()+`, `+pgx.Identifier{admin}.Sanitize())
	// Read access as the catalog gives submitters; every write goes through its functions.
	e.Exec(e.DB, `GRANT SELECT ON ALL TABLES IN SCHEMA deckhand TO deckhand_submitter`)
	asAlice, asAdmin := clientAs(t, e, alice), clientAs(t, e, admin)
	base := t.TempDir()
	submit := func(c *engine.Client, to string) (*deckhandtype.Export, error) {
		return export.Start(ctx, c, export.Request{Table: "facts", Group: "n1", To: to})
	}
	refused := func(c *engine.Client, to, reason string) {
		t.Helper()
		x, err := submit(c, to)
		if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), reason) {
			t.Errorf("export to %s: %+v, err = %v; want a refusal mentioning %q", to, x, err, reason)
		}
	}

	refused(asAlice, "file://"+base+"/a", "export_destinations")
	if err := e.Client.SetSetting(ctx, "export_destinations", "file://"+base+"/allowed , s3://bucket/team?region=r"); err != nil {
		t.Fatal(err)
	}
	for to, stored := range map[string]string{
		"file://" + base + "/allowed":              "file://" + base + "/allowed",
		"file://" + base + "/allowed/./sub//x/":    "file://" + base + "/allowed/sub/x",
		"s3://Bucket/team/2024?region=r":           "s3://bucket/team/2024?region=r",
		"s3://bucket/team?region=r":                "s3://bucket/team?region=r",
		"file://localhost" + base + "/allowed/y/z": "file://" + base + "/allowed/y/z",
	} {
		x, err := submit(asAlice, to)
		if err != nil {
			t.Errorf("export to %s: %v", to, err)
			continue
		}
		if x.Destination != stored {
			t.Errorf("export to %s stored %s, want %s", to, x.Destination, stored)
		}
	}
	refused(asAlice, "file:///etc", "export_destinations")
	refused(asAlice, "file://"+base+"/allowedX", "export_destinations")
	refused(asAlice, "file://"+base, "export_destinations")
	refused(asAlice, "s3://bucket/team/x?region=other", "export_destinations")
	refused(asAlice, "s3://bucket/team/x", "export_destinations")
	refused(asAlice, "file://"+base+"/allowed/../escape", `".."`)
	refused(asAdmin, "file://"+base+"/allowed/../escape", `".."`)
	if _, err := submit(asAdmin, "file:///etc/deckhand"); err != nil {
		t.Errorf("an admin exports anywhere: %v", err)
	}

	// Straight to the catalog function, spellings the client would have normalized or refused
	// are refused for everyone: the catalog does not trust the client's normalization.
	for _, c := range []*engine.Client{asAlice, asAdmin} {
		for _, to := range []string{
			"file://" + base + "/allowed/%2E%2E/%2E%2E/etc", "file://" + base + "/allowed/./x", "file://" + base + "/allowed/x/",
			"file://" + base + "/allowed//x", "file://" + base + "/allowed/x/..", "file://" + base + "/allowed/a%2Fb",
			"file://" + base + "/%61llowed/x", "FILE://" + base + "/allowed", "file://localhost" + base + "/allowed",
			"s3://k:secret@bucket/team?region=r", "s3://Bucket/team?region=r", "s3://bucket/team?region=r&endpoint=http%3A%2F%2Fh",
			"s3://bucket/team?aws_secret_access_key=x&region=r", "s3://bucket/team?endpoint=http%3A%2F%2Fk%3As%40h&region=r",
			"s3://bucket/team?region=r#x",
		} {
			var id, job int64
			err := c.Catalog().Pool.QueryRow(ctx, `SELECT export_id, job_id FROM deckhand.submit_export(
				'public.facts', 'public.facts', 'n1', 'n1', NULL, $1)`, to).Scan(&id, &job)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "normal form") {
				t.Errorf("submit_export(%s): export %d, err %v; want a refusal of the spelling", to, id, err)
			}
		}
	}

	// What the client writes, the catalog accepts as normal.
	for _, raw := range []string{
		"file:///x/my dir/a$b,c=d@e/ü", "s3://b/k?use_path_style=1&region=eu&endpoint=http://h:9000&disable_https=true",
		"s3://b.c-d_e", "file:///x/%7Ehome/a+b", "s3://b/x?kmskeyid=arn:aws:kms:r:1:key/k&ssetype=aws:kms",
	} {
		norm, err := export.NormalizeDestination(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		var problem *string
		if err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT deckhand.export_destination_problem($1)`, norm).Scan(&problem); err != nil {
			t.Fatal(err)
		}
		if problem != nil {
			t.Errorf("the catalog finds %s not normal: %s", norm, *problem)
		}
	}
}

// A destination with credentials or a secret query parameter is refused, and the secret is
// nowhere: not in what the command prints, not in listings, not in any catalog row.
func TestExportSecretsAreRefusedAndNeverStored(t *testing.T) {
	e, _ := single(t)
	const key, secret = "AKIAEXAMPLEKEY0001", "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"
	bin := testenv.Binary(t)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--catalog", e.DSN}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for _, to := range []string{
		"s3://" + key + ":" + secret + "@bucket/x",
		"s3://:" + secret + "@bucket/x",
		"s3://bucket/x?region=r&aws_secret_access_key=" + secret,
		"s3://bucket/x?" + key + "=" + secret,
		"s3://bucket/x?endpoint=http://" + key + ":" + secret + "@minio:9000",
		"file:///tmp/x?password=" + secret,
	} {
		out, code := run("export", "--table", "facts", "--group", "n1", "--to", to)
		if code != 2 {
			t.Errorf("export --to %s: exit %d, want 2 (refused): %s", to, code, out)
		}
		if strings.Contains(out, secret) || strings.Contains(out, key) {
			t.Errorf("the refusal of %s quotes the secret: %s", to, out)
		}
	}
	for _, args := range [][]string{{"export", "list"}, {"export", "list", "-o", "json"}, {"job", "list", "-o", "json"}} {
		out, code := run(args...)
		if code != 0 || strings.Contains(out, secret) || strings.Contains(out, key) {
			t.Errorf("%v: exit %d: %s", args, code, out)
		}
	}
	rows, err := e.Client.Catalog().Pool.Query(ctx, `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = 'deckhand'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 5 {
		t.Fatalf("catalog tables %v (err %v)", tables, err)
	}
	for _, table := range tables {
		var dump string
		if err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT coalesce(string_agg(x::text, ' '), '') FROM `+table+` x`).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(dump, secret) || strings.Contains(dump, key) {
			t.Errorf("%s holds the secret: %s", table, dump)
		}
	}
}

// A catalog row forged to borrow the owner's role (the job's submitter is not a member of the
// owner) is refused on the node by the coordinator and by the parts, and nothing is written.
func TestExportForgedRowsAreRefusedOnTheNode(t *testing.T) {
	g := newGroup(t, 1)
	g.role(t, "alice")
	g.role(t, "bob")
	if err := g.primary.Exec(ctx, g.db, `GRANT SELECT, UPDATE ON events, events_2024 TO bob`); err != nil {
		t.Fatal(err)
	}
	// Simulate tampering by someone who can write the catalog's tables: pretend alice, who is
	// not a member of bob, submitted the job.
	forge := func(jobID int64) { g.env.ForgeSubmitter(jobID, "alice") }
	req := func(dir string) export.Request {
		return export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, Owner: "bob", PartSize: 1 << 20}
	}

	// A forged coordinator: refused before it reads or writes anything.
	coordDir := filepath.Join(t.TempDir(), "coordinator")
	x, err := export.Start(ctx, g.env.Client, req(coordDir))
	if err != nil {
		t.Fatal(err)
	}
	forge(x.JobID)
	_, stop := g.env.Worker(engine.Config{Concurrency: 4})
	waitState(t, g, x.JobID, deckhandtype.JobFailed)
	if msg := lastError(t, g, x.JobID); !strings.Contains(msg, `"alice" is not a member of role "bob"`) {
		t.Errorf("coordinator error %q, want a refusal of alice acting as bob", msg)
	}
	if _, err := os.Stat(coordDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the forged export created its destination: %v", err)
	}

	// Forged parts: the job is forged after its coordinator was claimed (and so checked) as
	// the rightful submitter's, and before it plans the parts, which are claimed as the forged
	// job's. The test holds the claimed coordinator until the forgery is done.
	stop()
	claimed, release := make(chan struct{}, 1), make(chan struct{})
	pools := nodeconn.NewPools(4)
	t.Cleanup(pools.Close)
	coordinator := export.Coordinator{Catalog: g.env.Client.Catalog(), Pools: pools, Cleaner: cleanup.New(g.env.Client.Catalog(), pools)}
	held := engine.ExecutorFunc(func(ctx context.Context, t *deckhandtype.ClaimedTask) error {
		claimed <- struct{}{}
		<-release
		return coordinator.Run(ctx, t)
	})
	g.env.Worker(engine.Config{Concurrency: 4, Features: []engine.Feature{{Name: "export, coordinator held", Kinds: []engine.Kind{
		{Name: export.KindCoordinator, NeedsNode: true, Internal: true, New: func(engine.Deps) engine.Executor { return held }},
		{Name: export.KindPart, Internal: true, New: func(d engine.Deps) engine.Executor { return export.Part{Catalog: d.Catalog, Pools: d.Nodes} }},
	}}}})
	partsDir := filepath.Join(t.TempDir(), "parts")
	y, err := export.Start(ctx, g.env.Client, req(partsDir))
	if err != nil {
		t.Fatal(err)
	}
	<-claimed
	forge(y.JobID)
	close(release)
	waitState(t, g, y.JobID, deckhandtype.JobFailed)
	d, err := g.env.Client.Job(ctx, y.JobID)
	if err != nil {
		t.Fatal(err)
	}
	refusedParts := 0
	for _, task := range d.Tasks {
		if strings.HasPrefix(task.Name, "part-") && task.LastError != nil &&
			strings.Contains(task.LastError.Message, `"alice" is not a member of role "bob"`) {
			refusedParts++
		}
	}
	if refusedParts == 0 {
		t.Errorf("no part was refused for the forged submitter: %s", lastError(t, g, y.JobID))
	}
	if got := files(t, partsDir); len(got) != 0 {
		t.Errorf("forged parts wrote %v", got)
	}
}

type idRow struct {
	ID int64 `parquet:"id"`
}

// --table Mixed is the table mixed, as in PostgreSQL; --table '"Mixed"' is Mixed. The
// relation checked is the relation read.
func TestExportReadsTheRelationItChecks(t *testing.T) {
	e, db := single(t)
	e.Exec(db, `CREATE TABLE mixed (id bigint NOT NULL); INSERT INTO mixed SELECT g FROM generate_series(1, 100) g;
		CREATE TABLE "Mixed" (id bigint NOT NULL); INSERT INTO "Mixed" SELECT g FROM generate_series(1001, 1003) g`)
	e.Worker(engine.Config{Concurrency: 4})
	for table, want := range map[string][]int64{"Mixed": {1, 100, 100}, `"Mixed"`: {1001, 1003, 3}} {
		dir := t.TempDir()
		x, err := export.Start(ctx, e.Client, export.Request{Table: table, Group: "n1", To: "file://" + dir})
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, e, x.JobID, deckhandtype.JobFinished)
		var ids []int64
		for _, f := range readManifest(t, dir).Files {
			body, err := os.ReadFile(filepath.Join(dir, f.Key))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parquet.Read[idRow](strings.NewReader(string(body)), int64(len(body)))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) != int(want[2]) || len(ids) == 0 || slices.Min(ids) != want[0] || slices.Max(ids) != want[1] {
			t.Errorf("--table %s exported ids %v, want %d rows %d..%d (export of %s)", table, ids, want[2], want[0], want[1], x.Partition)
		}
	}
}

// A plain table's inheritance children are other relations, never checked, locked by OID
// nor sized: the export of the table holds its own rows only, as every part reads ONLY it.
func TestExportReadsNoInheritanceChild(t *testing.T) {
	e, db := single(t)
	e.Exec(db, `CREATE TABLE parent (id bigint NOT NULL); INSERT INTO parent SELECT g FROM generate_series(1, 100) g;
		CREATE TABLE kid () INHERITS (parent); INSERT INTO kid SELECT g FROM generate_series(5001, 5003) g`)
	e.Worker(engine.Config{Concurrency: 4})
	dir := t.TempDir()
	x, err := export.Start(ctx, e.Client, export.Request{Table: "parent", Group: "n1", To: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
	var ids []int64
	for _, f := range readManifest(t, dir).Files {
		body, err := os.ReadFile(filepath.Join(dir, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parquet.Read[idRow](strings.NewReader(string(body)), int64(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) != 100 || slices.Max(ids) != 100 {
		t.Errorf("exported %d rows up to id %d, want parent's own 100", len(ids), slices.Max(ids))
	}
}

// Row security applies to an export's owner that does not own the table: the table's owner
// decides the policies, whose code runs as the export's owner. An owner that is not a member of
// the export's owner (here bob, whose policy calls his function) is refused before anything is
// read; a trusted owner's policy applies, and the export holds the rows it lets through.
func TestExportRunsNoPolicyCodeOfAnotherRole(t *testing.T) {
	e, db := single(t)
	app, bob := e.Role("app"), e.Role("bob")
	qa, qb := pgx.Identifier{app}.Sanitize(), pgx.Identifier{bob}.Sanitize()
	e.Exec(db, `GRANT CREATE ON SCHEMA public TO `+qb)
	e.Exec(db, `CREATE TABLE bobs (id bigint NOT NULL); INSERT INTO bobs SELECT g FROM generate_series(1, 100) g;
		ALTER TABLE bobs OWNER TO `+qb+`;
		CREATE TABLE mine (id bigint NOT NULL); INSERT INTO mine SELECT g FROM generate_series(1, 100) g;
		ALTER TABLE mine ENABLE ROW LEVEL SECURITY; CREATE POLICY small ON mine USING (id <= 10);
		GRANT SELECT, UPDATE ON mine TO `+qa)
	bobConn := pgtest.Connect(t, e.Cluster.DSN(db, bob))
	if _, err := bobConn.Exec(ctx, `
		CREATE FUNCTION public.visible(bigint) RETURNS boolean LANGUAGE plpgsql AS $f$
		BEGIN RAISE EXCEPTION 'bob''s policy code ran as %', current_user; END $f$;
		ALTER TABLE bobs ENABLE ROW LEVEL SECURITY;
		CREATE POLICY everything ON bobs USING (public.visible(id));
		GRANT SELECT, UPDATE ON bobs TO `+qa); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{Concurrency: 4})

	x, err := export.Start(ctx, e.Client, export.Request{Table: "bobs", Group: "n1", Owner: app, To: "file://" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFailed)
	if msg := jobErrors(t, e, x.JobID); !strings.Contains(msg, "row security") || strings.Contains(msg, "policy code ran") {
		t.Errorf("error %q, want the export refused for bob's row security before any of it ran", msg)
	}

	dir := t.TempDir()
	x, err = export.Start(ctx, e.Client, export.Request{Table: "mine", Group: "n1", Owner: app, To: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
	if m := readManifest(t, dir); m.TotalRows != 10 {
		t.Errorf("exported %d rows of mine, want the 10 its policy lets %s see", m.TotalRows, app)
	}
}

// The owner's own functions and operators, placed before pg_catalog in its search_path, never
// answer for pg_catalog's in what the export sends in the owner's session: each raises.
func TestExportIgnoresTheOwnersFunctions(t *testing.T) {
	e, db := single(t)
	bob := e.Role("bob")
	qb := pgx.Identifier{bob}.Sanitize()
	e.Exec(db, `CREATE SCHEMA trojan AUTHORIZATION `+qb+`; ALTER TABLE facts OWNER TO `+qb)
	var ddl strings.Builder
	for _, f := range []struct{ name, args, returns string }{
		{"current_setting", "text", "text"}, {"set_config", "text, text, boolean", "text"},
		{"pg_relation_size", "regclass", "bigint"}, {"pg_current_wal_insert_lsn", "", "pg_lsn"},
		{"pg_is_in_recovery", "", "boolean"}, {"pg_last_wal_replay_lsn", "", "pg_lsn"},
		{"format_type", "oid, integer", "text"}, {"pg_has_role", "name, name, text", "boolean"},
		{"oid_eq", "oid, oid", "boolean"}, {"name_eq", "name, name", "boolean"}, {"tid_ge", "tid, tid", "boolean"},
		{"tid_lt", "tid, tid", "boolean"}, {"lsn_ge", "pg_lsn, pg_lsn", "boolean"}, {"lsn_mi", "pg_lsn, pg_lsn", "numeric"},
		{"int8_div", "bigint, bigint", "bigint"}, {"int2_gt", "smallint, integer", "boolean"},
	} {
		ddl.WriteString(`CREATE FUNCTION trojan.` + f.name + `(` + f.args + `) RETURNS ` + f.returns +
			` LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'trojan ` + f.name + ` called'; END $$;` + "\n")
	}
	for _, op := range []struct{ op, left, right, fn string }{
		{"=", "oid", "oid", "oid_eq"}, {"=", "name", "name", "name_eq"}, {">=", "tid", "tid", "tid_ge"}, {"<", "tid", "tid", "tid_lt"},
		{">=", "pg_lsn", "pg_lsn", "lsn_ge"}, {"-", "pg_lsn", "pg_lsn", "lsn_mi"}, {"/", "bigint", "bigint", "int8_div"},
		{">", "smallint", "integer", "int2_gt"},
	} {
		ddl.WriteString(`CREATE OPERATOR trojan.` + op.op + ` (LEFTARG = ` + op.left + `, RIGHTARG = ` + op.right +
			`, FUNCTION = trojan.` + op.fn + `);` + "\n")
	}
	ddl.WriteString(`ALTER ROLE ` + qb + ` IN DATABASE ` + pgx.Identifier{db}.Sanitize() + ` SET search_path = trojan, pg_catalog, public;`)
	e.Exec(db, ddl.String())
	e.Worker(engine.Config{Concurrency: 4})
	dir := t.TempDir()
	x, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir, Owner: bob, PartSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(x.JobID, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("export as %s ended %s: %s", bob, job.State, jobErrors(t, e, x.JobID))
	}
	if m := readManifest(t, dir); m.TotalRows != 2000 || len(m.Files) < 2 {
		t.Errorf("exported %d rows in %d files, want the table's 2000 in several", m.TotalRows, len(m.Files))
	}
}

// The cleanup record of an export's files addresses the export's own directory, however its
// name is spelled: a directory named "exp#1" (or "exp?1", "50%") is not its prefix "exp", whose
// export-<id>/ the cleaner would otherwise empty while leaving the export's own files behind.
func TestCancelledExportIsRemovedFromItsOwnDirectory(t *testing.T) {
	e, _ := single(t)
	// One slot, which the coordinator takes: no part runs until the export is cancelled.
	e.Worker(engine.Config{Concurrency: 1})
	base := t.TempDir()
	for i, c := range []struct{ name, cut string }{{"exp#1", "exp"}, {"exp?1", "exp"}, {"50%", "50"}} {
		dir := filepath.Join(base, c.name)
		got, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: (&url.URL{Scheme: "file", Path: dir}).String(), PartSize: 8192})
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("export-%d", got.ID)
		ours := filepath.Join(dir, prefix, "epoch-1", "part-00000.parquet")
		other := filepath.Join(base, c.cut, prefix, "keep")
		for _, f := range []string{ours, other} {
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			x, err := e.Client.Export(ctx, got.ID)
			return err == nil && x.PartsTotal > 0
		}, "the export is planned, its files registered for removal")
		if _, err := e.Client.Cancel(ctx, got.JobID); err != nil {
			t.Fatal(err)
		}
		waitJob(t, e, got.JobID, deckhandtype.JobCancelled)
		testenv.Eventually(t, 30*time.Second, func() bool {
			_, err := os.Stat(ours)
			return errors.Is(err, os.ErrNotExist)
		}, fmt.Sprintf("export %d (#%d) to %q has its files removed", got.ID, i, c.name))
		if _, err := os.Stat(other); err != nil {
			t.Errorf("%s, outside the export's directory, was removed: %v", other, err)
		}
	}
}

// An export's coordinator holds a session on the primary while its parts run, and takes none
// of the node's max_tasks slots, or its parts could never run. Yet exports must not make the
// node hold a session each: at most max_tasks coordinators run on a node at once, the rest
// wait their turn. Here they all wait for a lock someone holds on the table.
func TestExportCoordinatorsAreBoundedPerNode(t *testing.T) {
	e, db := single(t)
	holder := pgtest.Connect(t, e.Cluster.DSN(db, pgcluster.Superuser))
	if _, err := holder.Exec(ctx, `BEGIN; LOCK TABLE facts IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{Concurrency: 20})
	base := t.TempDir()
	var jobs []int64
	t.Cleanup(func() {
		for _, id := range jobs {
			e.Client.Cancel(context.Background(), id) //nolint:errcheck
		}
	})
	for i := range 8 {
		x, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + filepath.Join(base, strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, x.JobID)
	}
	catalogPool, nodePool := e.Pool(e.DB), e.Pool(db)
	running := func() int {
		var n int
		if err := catalogPool.QueryRow(ctx, `SELECT count(*) FROM deckhand.task WHERE kind = 'export' AND state = 'running'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return running() >= 4 }, "coordinators run")
	time.Sleep(time.Second) // time for more claims, should any be wrongly allowed
	if n := running(); n > 4 {
		t.Errorf("%d coordinators run on node n1, whose max_tasks is 4", n)
	}
	var sessions int
	if err := nodePool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'deckhand task %'`).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions > 4 {
		t.Errorf("the node holds %d sessions of coordinators, want at most 4", sessions)
	}
}
