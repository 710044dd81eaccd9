package export_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

func readManifest(t *testing.T, dir string) export.Manifest {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(dir, export.ManifestKey))
	if err != nil {
		t.Fatalf("%v; the destination holds: %s", err, listing(dir))
	}
	var m export.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// listing names what dir holds at its top and how many files are below each directory there,
// for a failure to show what an export left.
func listing(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
			continue
		}
		n := 0
		filepath.WalkDir(filepath.Join(dir, e.Name()), func(_ string, d fs.DirEntry, err error) error { //nolint:errcheck
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		names = append(names, fmt.Sprintf("%s/ (%d files)", e.Name(), n))
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}

type eventRow struct {
	ID   int64   `parquet:"id"`
	Kind *int32  `parquet:"kind"`
	Note *string `parquet:"note"`
	Doc  *string `parquet:"doc"`
}

// readBack reads every file the manifest lists, checking its sha256, and returns the number of
// rows, the sum of ids and how many ids were seen twice.
func readBack(t *testing.T, dir string, m export.Manifest) (rows, idSum int64, dups int) {
	t.Helper()
	seen := map[int64]bool{}
	for _, f := range m.Files {
		body, err := os.ReadFile(filepath.Join(dir, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(body)) != f.Bytes {
			t.Fatalf("%s: sha256 or size differs from the manifest", f.Key)
		}
		got, err := parquet.Read[eventRow](strings.NewReader(string(body)), int64(len(body)))
		if err != nil {
			t.Fatalf("%s: %v", f.Key, err)
		}
		if int64(len(got)) != f.Rows {
			t.Fatalf("%s: %d rows, manifest says %d", f.Key, len(got), f.Rows)
		}
		for _, r := range got {
			if seen[r.ID] {
				dups++
			}
			seen[r.ID] = true
			idSum += r.ID
		}
		rows += int64(len(got))
	}
	return rows, idSum, dups
}

func sourceSums(t *testing.T, cl *pgcluster.Cluster, db, table string) (rows, idSum int64) {
	t.Helper()
	conn := pgtest.Connect(t, cl.DSN(db, pgcluster.Superuser))
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(id), 0) FROM `+table).Scan(&rows, &idSum); err != nil {
		t.Fatal(err)
	}
	return rows, idSum
}

// A partition exports as parts spread over the primary and its standby; the manifest lists
// every file with its checksum, and the files hold exactly the partition's rows.
func TestExportSpreadsPartsOverReplicas(t *testing.T) {
	g := newGroup(t, 2)
	g.env.Worker(engine.Config{Concurrency: 8})
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{
		Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 256 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	// While it runs, its coordinator task reports the parts written of those planned.
	var readings []deckhandtype.NamedProgress
	testenv.Eventually(t, 60*time.Second, func() bool {
		ps, err := g.env.Client.Progress(ctx, e.JobID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			// Part tasks report their own COPY progress beside it; only the coordinator's counts parts.
			if p.Task != "coordinator" {
				continue
			}
			if len(readings) == 0 || readings[len(readings)-1].TaskProgress.Done != p.Done {
				readings = append(readings, p)
			}
		}
		j, err := g.env.Client.JobRow(ctx, e.JobID)
		return err == nil && j.State.Terminal()
	}, "the export ends")
	job := g.env.Wait(e.JobID, 60*time.Second)
	if job.State != deckhandtype.JobFinished {
		d, _ := g.env.Client.Job(ctx, e.JobID)
		t.Fatalf("export job %s: %+v", job.State, d.Attempts)
	}
	m := readManifest(t, dir)
	partial := false
	for _, r := range readings {
		if r.Command != "EXPORT" || r.Unit != "parts" || r.Total != int64(len(m.Files)) || r.Done > r.Total {
			t.Errorf("export progress %+v; want EXPORT parts out of %d", r, len(m.Files))
		}
		partial = partial || r.Done < r.Total
	}
	if !partial {
		t.Fatalf("no reading of the export's progress before its last part: %+v", readings)
	}
	t.Logf("%d readings of the export's progress, the first: %s: %s", len(readings), readings[0].Task, readings[0].TaskProgress)
	if len(m.Files) < 4 {
		t.Fatalf("%d files; want the partition split into several parts", len(m.Files))
	}
	nodes := map[string]int{}
	for _, f := range m.Files {
		nodes[f.Node]++
	}
	if nodes["p1"] == 0 || nodes["s1"] == 0 {
		t.Errorf("parts per node = %v, want both the primary and the standby used", nodes)
	}
	rows, idSum, dups := readBack(t, dir, m)
	wantRows, wantSum := sourceSums(t, g.primary, g.db, "events_2024")
	if rows != wantRows || idSum != wantSum || dups != 0 || m.TotalRows != wantRows {
		t.Fatalf("read back %d rows (sum %d, %d duplicates), manifest %d; source has %d rows (sum %d)",
			rows, idSum, dups, m.TotalRows, wantRows, wantSum)
	}
	got, err := g.env.Client.Export(ctx, e.ID)
	if err != nil || got.State != deckhandtype.ExportCommitted || got.PartsDone != len(m.Files) || got.Rows != wantRows {
		t.Fatalf("export status = %+v (err %v)", got, err)
	}
	// The destination holds the manifest and the Parquet files it names, nothing else (no
	// sidecar files that a reader given the directory would take for data).
	named := map[string]bool{export.ManifestKey: true}
	for _, f := range m.Files {
		named[f.Key] = true
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !named[filepath.ToSlash(rel)] {
			t.Errorf("the destination holds %s, which the manifest does not name", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The same partition to the same place again is refused, unless forced.
	_, err = export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir})
	if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second export: err = %v, want a refusal naming --force", err)
	}
	again, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if job := g.env.Wait(again.JobID, 60*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("forced export %s", job.State)
	}
	m2 := readManifest(t, dir)
	if m2.ExportID != again.ID {
		t.Fatalf("manifest is of export %d, want the forced one %d", m2.ExportID, again.ID)
	}
	if rows, _, _ := readBack(t, dir, m2); rows != wantRows {
		t.Fatalf("forced export read back %d rows, want %d", rows, wantRows)
	}
	first, _ := g.env.Client.Export(ctx, e.ID)
	if first.State != deckhandtype.ExportSuperseded {
		t.Errorf("the first export is %s, want superseded", first.State)
	}
}

func waitState(t *testing.T, g *group, jobID int64, want deckhandtype.JobState) deckhandtype.Job {
	t.Helper()
	job := g.env.Wait(jobID, 90*time.Second)
	if job.State != want {
		d, _ := g.env.Client.Job(ctx, jobID)
		var bad []string
		for _, task := range d.Tasks {
			if task.State != deckhandtype.TaskDone && len(bad) < 10 {
				bad = append(bad, task.Name+" "+string(task.State)+": "+task.LastError.String())
			}
		}
		t.Fatalf("job %d is %s, want %s; tasks not done: %s", jobID, job.State, want, strings.Join(bad, "; "))
	}
	return job
}

func lastError(t *testing.T, g *group, jobID int64) string {
	t.Helper()
	d, err := g.env.Client.Job(ctx, jobID)
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

// Bad requests are refused at once, before anything runs; problems only the primary can see
// fail the export's job with a clear reason and leave no files.
func TestExportRefusals(t *testing.T) {
	g := newGroup(t, 2)
	g.env.Worker(engine.Config{Concurrency: 4})
	if err := g.primary.Exec(ctx, g.db, `
		CREATE TABLE shapes (id int, p point);
		INSERT INTO shapes VALUES (1, '(1,2)');`); err != nil {
		t.Fatal(err)
	}
	g.role(t, "reader")
	g.role(t, "looker")
	if err := g.primary.Exec(ctx, g.db, `GRANT SELECT ON events_2024 TO looker`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		req  export.Request
		want string
	}{
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "ftp://host/x"}, "unsupported scheme"},
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "relative/dir"}, "not a URL"},
		{export.Request{Table: "events", Partition: "events_2024", Group: "nogroup", To: "file://" + dir}, "no nodes"},
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, Compression: "lz4"}, "lz4"},
		// What the primary has is checked at submission too.
		{export.Request{Table: "events", Partition: "events_2025x", Group: "g1", To: "file://" + dir + "/x"},
			"relation public.events_2025x does not exist on node p1"},
		{export.Request{Table: "eventz", Partition: "events_2024", Group: "g1", To: "file://" + dir + "/x"},
			"relation public.eventz does not exist on node p1"},
		{export.Request{Table: "events", Partition: "shapes", Group: "g1", To: "file://" + dir + "/y"}, "public.shapes is not a partition of public.events"},
		{export.Request{Table: "events", Group: "g1", To: "file://" + dir + "/z"}, "public.events is partitioned: name a leaf partition with --partition"},
		{export.Request{Table: "shapes", Group: "g1", To: "file://" + dir + "/shapes"}, `public.shapes: column "p" has type point, which export does not support`},
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir + "/r", Owner: "reader"},
			"owner reader may not read public.events_2024 on node p1: permission denied"},
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir + "/r", Owner: "looker"},
			"owner looker may not lock public.events_2024 on node p1 in SHARE mode"},
	} {
		_, err := export.Start(ctx, g.env.Client, c.req)
		if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want a refusal mentioning %q", c.req, err, c.want)
		}
	}
	for _, c := range []struct {
		req  export.Request
		want string
	}{
		{export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file:///proc/version/out"}, "version"},
	} {
		e, err := export.Start(ctx, g.env.Client, c.req)
		if err != nil {
			t.Fatalf("%+v: %v", c.req, err)
		}
		waitState(t, g, e.JobID, deckhandtype.JobFailed)
		if msg := lastError(t, g, e.JobID); !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q, want it to mention %q", c.req.To, msg, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed exports left %d entries in the destination", len(entries))
	}
}

// Cancelling an export kills it and removes its partial files through the cleaner.
func TestExportCancelRemovesFiles(t *testing.T) {
	g := newGroup(t, 1)
	g.env.Worker(engine.Config{Concurrency: 2})
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := g.env.Client.Export(ctx, e.ID)
		return err == nil && got.PartsDone >= 2
	}, "some parts are written")
	if _, err := g.env.Client.Cancel(ctx, e.JobID); err != nil {
		t.Fatal(err)
	}
	waitState(t, g, e.JobID, deckhandtype.JobCancelled)
	// Files and the directories that held them: the destination is as it was.
	testenv.Eventually(t, 30*time.Second, func() bool {
		entries, err := os.ReadDir(dir)
		return err == nil && len(entries) == 0
	}, "the cancelled export's files and directories are removed")
	got, _ := g.env.Client.Export(ctx, e.ID)
	if got.State != "cancelled" {
		t.Errorf("export state %s, want cancelled", got.State)
	}
}

// Writes to the partition during the export wait for it: the export holds exactly the rows of
// its consistency point, and the writer goes on once the export commits.
func TestExportIsConsistentUnderWrites(t *testing.T) {
	g := newGroup(t, 1)
	g.env.Worker(engine.Config{Concurrency: 2})
	wantRows, wantSum := sourceSums(t, g.primary, g.db, "events_2024")
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := g.env.Client.Export(ctx, e.ID)
		return err == nil && got.PartsTotal > 0
	}, "the export holds its consistency point")
	writer := pgtest.Connect(t, g.primary.DSN(g.db, pgcluster.Superuser))
	inserted := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, `INSERT INTO events VALUES (1000001, '2024-06-01', 1, 'late', '{}', 1)`)
		inserted <- err
	}()
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	if err := <-inserted; err != nil {
		t.Fatalf("the writer failed: %v", err)
	}
	rows, idSum, dups := readBack(t, dir, readManifest(t, dir))
	if rows != wantRows || idSum != wantSum || dups != 0 {
		t.Fatalf("exported %d rows (sum %d, %d dups), want the %d rows (sum %d) of the consistency point", rows, idSum, dups, wantRows, wantSum)
	}
	if after, _ := sourceSums(t, g.primary, g.db, "events_2024"); after != wantRows+1 {
		t.Fatalf("the concurrent insert did not land after the export (%d rows)", after)
	}
}

// A standby that has not replayed up to the consistency point gets no part until it has.
func TestExportWaitsForLaggingStandby(t *testing.T) {
	g := newGroup(t, 1)
	if err := g.standby.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.standby.ResumeReplay(ctx) }) // the standby is shared
	// A write after the pause puts the standby behind any point taken from now on.
	if err := g.primary.Exec(ctx, g.db, `INSERT INTO events_2025 VALUES (1, '2025-02-01', 1, 'x', '{}', 1)`); err != nil {
		t.Fatal(err)
	}
	g.env.Worker(engine.Config{Concurrency: 4})
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := g.env.Client.Export(ctx, e.ID)
		return err == nil && got.PartsDone >= 5
	}, "parts run on the primary")
	parts, err := g.env.Client.Catalog().ExportParts(ctx, e.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p.Node != nil && *p.Node == "s1" {
			t.Fatalf("part %d ran on the standby while it was behind the consistency point", p.Part)
		}
	}
	if err := g.standby.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	m := readManifest(t, dir)
	wantRows, _ := sourceSums(t, g.primary, g.db, "events_2024")
	if rows, _, dups := readBack(t, dir, m); rows != wantRows || dups != 0 {
		t.Fatalf("read back %d rows (%d dups), want %d", rows, dups, wantRows)
	}
}

// kill -9 of the worker running the coordinator mid-export: the lock goes with it, the next
// attempt takes a new consistency point and re-reads every part, and the export completes
// with no missing or duplicated row.
func TestExportSurvivesKilledCoordinator(t *testing.T) {
	g := newGroup(t, 2)
	dir := t.TempDir()
	procs := map[string]*testenv.Process{}
	for _, name := range []string{"w1", "w2"} {
		procs[name] = g.env.Serve("--lease", "1s", "--maintenance-interval", "100ms", "--concurrency", "2", "--name", name)
	}
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until some parts are done, then kill the process that coordinates.
	var victim *testenv.Process
	testenv.Eventually(t, 60*time.Second, func() bool {
		d, err := g.env.Client.Job(ctx, e.JobID)
		if err != nil || d.Tasks[0].WorkerID == nil {
			return false
		}
		got, _ := g.env.Client.Export(ctx, e.ID)
		if got == nil || got.PartsDone < 3 {
			return false
		}
		workers, _ := g.env.Client.Workers(ctx, false)
		for _, w := range workers {
			if w.ID == *d.Tasks[0].WorkerID {
				victim = procs[w.Name]
			}
		}
		return victim != nil
	}, "the export is under way")
	if err := victim.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.Cmd.Wait() //nolint:errcheck
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	if _, err := os.Stat(filepath.Join(dir, export.ManifestKey)); err != nil {
		// What the catalog says of the export, for the failure below.
		got, _ := g.env.Client.Export(ctx, e.ID)
		var attempts []string
		if d, err := g.env.Client.Job(ctx, e.JobID); err == nil {
			for _, a := range d.Attempts {
				attempts = append(attempts, fmt.Sprintf("%s#%d=%s", a.TaskName, a.Attempt, a.Outcome))
			}
		}
		t.Logf("export %+v; attempts %v", got, attempts)
	}
	m := readManifest(t, dir)
	wantRows, wantSum := sourceSums(t, g.primary, g.db, "events_2024")
	rows, idSum, dups := readBack(t, dir, m)
	if rows != wantRows || idSum != wantSum || dups != 0 {
		t.Fatalf("read back %d rows (sum %d, %d dups), want %d rows (sum %d)", rows, idSum, dups, wantRows, wantSum)
	}
	got, _ := g.env.Client.Export(ctx, e.ID)
	d, _ := g.env.Client.Job(ctx, e.JobID)
	lost := 0
	for _, a := range d.Attempts {
		if a.Outcome == deckhandtype.OutcomeLost {
			lost++
		}
	}
	if lost == 0 {
		t.Errorf("no attempt was lost: the kill did not hit the export")
	}
	t.Logf("export finished in epoch %d with %d lost attempts; %d files", got.Epoch, lost, len(m.Files))
}

// The manifest is written for people as well as programs: type names such as LIST<INT32>
// appear as they are, not as \u003c escapes.
func TestManifestNamesTypesPlainly(t *testing.T) {
	g := newGroup(t, 2)
	g.env.Worker(engine.Config{Concurrency: 2})
	if err := g.primary.Exec(ctx, g.db, `CREATE TABLE lists (id int, tags int[]); INSERT INTO lists VALUES (1, '{1,2}')`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e, err := export.Start(ctx, g.env.Client, export.Request{Table: "lists", Group: "g1", To: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	body, err := os.ReadFile(filepath.Join(dir, export.ManifestKey))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"parquet_type": "LIST<INT32>"`) {
		t.Fatalf("the manifest does not name the list column's type as LIST<INT32>:\n%s", body)
	}
}
