package export

import (
	"time"

	"github.com/deckhandhq/deckhand/export/parquetcopy"
)

// Manifest is `_manifest.json`, written last: the export exists for readers only once it does,
// and then only the files it lists belong to it.
type Manifest struct {
	Format         string                         `json:"format"` // "deckhand-export/1"
	ExportID       int64                          `json:"export_id"`
	Source         ManifestSource                 `json:"source"`
	ConsistencyLSN string                         `json:"consistency_lsn"`
	Consistency    string                         `json:"consistency"` // how the point was held
	Compression    string                         `json:"compression"`
	Schema         []parquetcopy.FieldDescription `json:"schema"`
	Files          []ManifestFile                 `json:"files"`
	TotalRows      int64                          `json:"total_rows"`
	TotalBytes     int64                          `json:"total_bytes"`
	CommittedAt    time.Time                      `json:"committed_at"`
}

// ManifestSource names what was exported.
type ManifestSource struct {
	Table     string `json:"table"`
	Partition string `json:"partition"`
	Group     string `json:"group"`
	Pages     int64  `json:"pages"`
}

// ManifestFile is one Parquet file of the export.
type ManifestFile struct {
	Key       string `json:"key"`
	Part      int    `json:"part"`
	StartPage int64  `json:"start_page"`
	EndPage   *int64 `json:"end_page"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Node      string `json:"node"`
}
