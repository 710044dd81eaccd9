package move

import (
	"context"
	"errors"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// Mover runs move tasks.
type Mover struct {
	Cleaner *cleanup.Cleaner
}

// Run performs one attempt of a move.
func (m Mover) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	if _, err := ParsePayload(t.Payload); err != nil {
		return taskerr.Permanent(err)
	}
	return taskerr.Permanent(errors.New("move: this worker cannot run online moves yet"))
}
