package export_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
)

// Whoever may write to a destination's store (a hostile or compromised object store, which
// may answer with as large a body as it likes; another role that writes under a shared
// prefix) may put a `_manifest.json` there of any size. The coordinator read the whole of it
// into the worker's memory, which every other user's running tasks share, to learn whose it
// is: a manifest of a few gigabytes killed the worker, and each retry the next one. Only the
// manifest's first fields say whose it is, and only they are read.
func TestAttackHugeManifestAtTheDestinationIsNotReadWhole(t *testing.T) {
	e, _ := single(t)
	e.Worker(engine.Config{})
	dir := t.TempDir()
	// A sparse file: it takes no disk, and reads as 256 MiB.
	f, err := os.Create(filepath.Join(dir, export.ManifestKey))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"format": "deckhand-export/1", "files": ["`); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	x, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + dir})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFailed)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("the export allocated %d MiB with a 256 MiB manifest at its destination: it read it whole", grew>>20)
	}
	if msg := jobErrors(t, e, x.JobID); !strings.Contains(msg, "already holds an export") {
		t.Errorf("error %q, want it to say the destination holds an export", msg)
	}
}
