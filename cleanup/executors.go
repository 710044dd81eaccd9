package cleanup

import (
	"github.com/deckhandhq/deckhand/executor"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Executors returns the built-in task kinds that create or drop resources — drop and
// move_table — for engine.Config.Executors. They connect to nodes through pools, as each
// task's owner.
func Executors(cat *catalog.Catalog, pools *executor.Pools) executor.Registry {
	c := New(cat, pools)
	return executor.Registry{
		executor.KindDrop: executor.Drop{Pools: pools, Catalog: cat},
		KindMoveTable:     MoveTable{Cleaner: c},
	}
}
