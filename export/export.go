// Package export copies one partition of a node group to object storage as Parquet.
//
// An export is one job. Its first task, the coordinator (kind "export"), runs on the group's
// primary as the export's owner. It checks the partition and its columns, then takes the
// consistency point and holds it for the export's whole duration:
//
//	BEGIN; LOCK TABLE ONLY partition IN SHARE MODE;  -- writers wait, readers do not
//	SELECT pg_current_wal_insert_lsn();               -- every earlier commit is at or before it
//
// No write to the partition can happen while the lock is held, so any member of the group
// whose replay position has passed that LSN sees exactly the same rows. The coordinator splits
// the heap into ctid page ranges and adds one task per range (kind "export_part") to its own
// job, targeting the node group with min_lsn = the consistency point; the claim deals them over
// the members that have replayed that far. Each part writes one Parquet file under a key that
// is deterministic per (export, epoch, part): a retried part overwrites its own file.
//
// When every part is done, the coordinator checks that its lock session is still alive,
// writes `_manifest.json` last, and marks the export committed. If the coordinator is lost
// (its worker dies, its session drops) the lock is gone with it: its next attempt takes a new
// consistency point under a new epoch and every part is read again; parts of the old epoch are
// cancelled and never listed. An export is never committed as a mix of two states.
//
// A paused export holds no lock. Once its job is being paused and none of its parts runs, the
// coordinator has its attempt released, as `job pause --now` releases it at once (uncharged),
// and the lock goes with its session: the job is paused, the partition's writers go on. After
// the resume its next attempt takes a new consistency point, as after a lost coordinator.
//
// Failed or cancelled exports leave no files: the coordinator registers the export's
// directory with the cleaner (policy on_failure) before any file is written.
package export

import (
	"time"

	"github.com/deckhandhq/deckhand/engine"
)

// Task kinds.
const (
	KindCoordinator = "export"
	KindPart        = "export_part"
)

// Defaults.
const (
	DefaultPartSize    = 128 << 20 // heap bytes per part
	DefaultCompression = "zstd"
	lockTimeout        = 5 * time.Second
	replayWait         = time.Minute
)

// Compressions are the accepted --compression values.
var Compressions = []string{"zstd", "snappy", "none"}

type partPayload struct {
	ExportID int64 `json:"export_id"`
	Epoch    int   `json:"epoch"`
	Part     int   `json:"part"`
}

// Feature is the export feature, for engine.Open and engine.NewWorker: the coordinator and
// part kinds, which deckhand itself creates (`deckhand export`, Start) and never takes from a
// submitted job.
func Feature() engine.Feature {
	return engine.Feature{Name: "export", Kinds: []engine.Kind{
		{Name: KindCoordinator, NeedsNode: true, Internal: true, New: func(d engine.Deps) engine.Executor {
			return Coordinator{Catalog: d.Catalog, Pools: d.Nodes, Cleaner: d.Cleaner}
		}},
		{Name: KindPart, Internal: true, New: func(d engine.Deps) engine.Executor {
			return Part{Catalog: d.Catalog, Pools: d.Nodes}
		}},
	}}
}
