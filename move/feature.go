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
	"github.com/deckhandhq/deckhand/internal/nodeconn"
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

// literal quotes a string as a literal for the move's sessions (nodeconn.QuoteLiteral), with
// what no literal can carry replaced: a NUL dropped, bytes that are not UTF-8 as U+FFFD.
func literal(s string) string {
	q, _ := nodeconn.QuoteLiteral(strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD"))
	return q
}
