package cli

import (
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/schedule"
)

// features are the feature packages this command line ships: what its clients may submit and
// its workers run, besides the engine's own sql and noop.
func features() []engine.Feature {
	return []engine.Feature{drop.Feature(), move.Feature(), export.Feature(), schedule.Feature()}
}
