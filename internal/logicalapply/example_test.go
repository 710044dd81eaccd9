package logicalapply_test

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// The catch-up of a move: apply the slot until the cut-over, running again with new
// connections whenever one is lost. connect opens a replication connection to the source and
// a session on the target, both as the owner; record stores a position in the catalog;
// consistentPoint is the slot's, whose snapshot the rows were copied under.
func Example() {
	var (
		ctx             = context.Background()
		connect         func(context.Context) (*pgconn.PgConn, *pgx.Conn, error)
		record          func(context.Context, pglogrepl.LSN) error
		consistentPoint pglogrepl.LSN
		progress        = pgx.Identifier{"deckhand_move", "progress_42"}
	)
	a := logicalapply.New(logicalapply.Config{
		Slot: "deckhand_move_42", Publication: "deckhand_move_42",
		ProgressTable: progress, Applied: record,
	})
	for {
		src, dst, err := connect(ctx)
		if err == nil {
			if err = logicalapply.EnsureProgressTable(ctx, dst, progress); err == nil {
				var applied pglogrepl.LSN
				if applied, err = logicalapply.AppliedLSN(ctx, dst, progress); err == nil {
					a.Use(src, dst)
					err = a.Run(ctx, max(applied, consistentPoint))
				}
			}
			src.Close(ctx)
			dst.Close(ctx)
		}
		var refused *logicalapply.ApplyError
		if ctx.Err() != nil || errors.As(err, &refused) || !taskerr.Retryable(err) {
			return // ended, or the target refused a change: the move fails
		}
		time.Sleep(time.Second) // then resume exactly where the target is
	}
	// Meanwhile, the cut-over blocks writes on the source, reads pg_current_wal_lsn() there
	// and calls a.WaitApplied(ctx, thatLSN) before switching.
}
