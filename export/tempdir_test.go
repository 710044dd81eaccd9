package export_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
)

// A file:// destination is often another file system than the worker's TMPDIR (an archive
// disk, an NFS mount), where a temporary file made in TMPDIR cannot be renamed into place
// ("invalid cross-device link"). Files are written beside where they go and renamed there, so
// the export works with a TMPDIR where nothing can be created at all. What a writer that died
// left beside the parts or the manifest (a killed worker's temporary file) is removed at the
// commit.
func TestExportDoesNotUseTheWorkersTempDir(t *testing.T) {
	g := newGroup(t, 2)
	dir := t.TempDir()
	// The export will be the catalog's first: its files go to export-1/epoch-1/.
	stray := filepath.Join(dir, "export-1", "epoch-1", "part-00000.parquet.18ed5774cbe37c0a.tmp")
	if err := os.MkdirAll(filepath.Dir(stray), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stray, []byte("half a part"), 0o644); err != nil {
		t.Fatal(err)
	}
	// And at the root, a manifest whose writer was killed before renaming it into place.
	if err := os.WriteFile(filepath.Join(dir, "_manifest.json.18ed5774cbe37c0b.tmp"), []byte(`{"export_id": 1`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "absent"))
	g.env.Worker(engine.Config{Concurrency: 4})
	e, err := export.Start(ctx, g.env.Client, export.Request{
		Table: "events", Partition: "events_2024", Group: "g1", To: "file://" + dir, PartSize: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != 1 {
		t.Fatalf("export %d; the stray file was left for export 1", e.ID)
	}
	waitState(t, g, e.JobID, deckhandtype.JobFinished)
	m := readManifest(t, dir)
	rows, _, dups := readBack(t, dir, m)
	if want, _ := sourceSums(t, g.primary, g.db, "events_2024"); rows != want || dups != 0 {
		t.Fatalf("read back %d rows (%d duplicates), want %d", rows, dups, want)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			t.Errorf("temporary file left in the destination: %s", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
