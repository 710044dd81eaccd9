// Package move moves a schema, or some tables, online from the primary of one node group to
// the primary of another, as the tables' owner (no superuser on either side): the structure
// with pg_dump, the rows under a replication slot's exported snapshot, the changes since then
// applied from the slot (package logicalapply), and a cut-over that blocks writers on the
// source for at most --max-write-block, after which the source refuses writes loudly and is
// dropped once no query uses it. Every resource is registered with the cleaner before it is
// created, so whatever fails — a statement, a connection, the worker process — either a new
// attempt completes the move or the cleaner puts both nodes back as they were.
package move

import (
	"encoding/json"
	"strings"

	"github.com/deckhandhq/deckhand/engine"
)

// Feature is the move feature, for engine.Open and engine.NewWorker.
func Feature() engine.Feature {
	return engine.Feature{Name: "move", Kinds: []engine.Kind{{
		Name: Kind,
		Validate: func(raw json.RawMessage) error {
			_, err := ParsePayload(raw)
			return err
		},
		Check: checkSubmission,
		New:   func(d engine.Deps) engine.Executor { return Mover{Cleaner: d.Cleaner} },
	}}}
}

// literal quotes a string as an escape-string literal, whatever standard_conforming_strings says.
func literal(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
