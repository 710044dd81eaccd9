package export

import (
	"encoding/json"
	"io"
)

// maxManifestHead bounds what is read of a manifest found at a destination. Whoever may
// write to the store (another role under a shared prefix, a hostile object store) chooses
// its size, and the worker's memory is every running task's: only the fields that say whose
// the manifest is are read, and deckhand writes them first, in far less than this.
const maxManifestHead = 1 << 20

// manifestHead reads the export id and source of the manifest r holds, reading no further
// than they are and at most maxManifestHead bytes; ok false when it has not both there.
func manifestHead(r io.Reader) (m Manifest, ok bool) {
	dec := json.NewDecoder(io.LimitReader(r, maxManifestHead))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Manifest{}, false
	}
	var haveID, haveSource bool
	for !(haveID && haveSource) && dec.More() {
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			return Manifest{}, false
		}
		switch key {
		case "export_id":
			err, haveID = dec.Decode(&m.ExportID), true
		case "source":
			err, haveSource = dec.Decode(&m.Source), true
		default:
			err = skipValue(dec)
		}
		if err != nil {
			return Manifest{}, false
		}
	}
	return m, haveID && haveSource
}

// skipValue reads past the next value token by token, holding none of it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
