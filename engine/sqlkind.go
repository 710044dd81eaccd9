package engine

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// sqlExecutor runs a task's SQL text on its node, connected as its owner, with the job's
// search_path and settings, in a transaction unless the task says otherwise.
type sqlExecutor struct{ pools *nodeconn.Pools }

func (s sqlExecutor) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	o, err := nodeconn.TaskOwner(t)
	if err != nil {
		return err
	}
	conn, release, err := s.pools.TaskSession(ctx, o, t)
	if err != nil {
		return err
	}
	defer release()
	if !t.InTransaction {
		_, err = conn.Exec(ctx, t.SQL)
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, t.SQL)
		return err
	})
}
