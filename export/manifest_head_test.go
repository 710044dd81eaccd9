package export

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/export/parquetcopy"
)

// A manifest as the coordinator writes it, however many files it lists, is recognized from
// its first fields; what is not a manifest, or puts them past the bound, is not.
func TestManifestHeadReadsTheLeadingFields(t *testing.T) {
	m := Manifest{Format: "deckhand-export/1", ExportID: 42,
		Source: ManifestSource{Table: "facts", Partition: "facts_2026", Group: "g1", Pages: 9},
		Schema: []parquetcopy.FieldDescription{{}}}
	// About 260 bytes a file, indented: 10,000 of them are two and a half times the bound.
	for i := range 10000 {
		m.Files = append(m.Files, ManifestFile{Key: "export-42/epoch-1/part.parquet", Part: i, SHA256: strings.Repeat("0", 64)})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	if buf.Len() <= maxManifestHead {
		t.Fatalf("the manifest is %d bytes: make it larger than the bound", buf.Len())
	}
	got, ok := manifestHead(&buf)
	if !ok || got.ExportID != 42 || got.Source != m.Source {
		t.Errorf("manifestHead of a written manifest: %+v, %v", got, ok)
	}
	for _, bad := range []string{``, `[]`, `{"export_id": 42}`, `{"export_id": "x", "source": {}}`,
		`{"files": ["` + strings.Repeat("x", maxManifestHead) + `"], "export_id": 42, "source": {}}`} {
		if got, ok := manifestHead(strings.NewReader(bad)); ok {
			t.Errorf("manifestHead(%.40q) = %+v, want not a manifest", bad, got)
		}
	}
	// Fields in another order, values skipped on the way.
	if got, ok := manifestHead(strings.NewReader(`{"files": [{"a": [1, {"b": null}]}], "source": {"partition": "p"}, "export_id": 7}`)); !ok ||
		got.ExportID != 7 || got.Source.Partition != "p" {
		t.Errorf("manifestHead of reordered fields: %+v, %v", got, ok)
	}
}
