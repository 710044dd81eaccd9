package export

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"gocloud.dev/blob"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/executor"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
)

// Part runs the "export_part" task: one page range to one Parquet file, on whichever member
// of the group the claim chose.
type Part struct {
	Catalog *catalog.Catalog
	Pools   *executor.Pools
}

var errSuperseded = errors.New("superseded: the export's coordinator no longer holds this consistency point")

func (x Part) Run(ctx context.Context, t *catalog.ClaimedTask) error {
	var p partPayload
	if err := json.Unmarshal(t.Payload, &p); err != nil || p.ExportID == 0 {
		return executor.Permanent(fmt.Errorf("export part payload: %v", err))
	}
	if t.Node == nil || t.NodeDSN == nil {
		return executor.Permanent(errors.New("no node was assigned to this part"))
	}
	e, part, coordinator, err := x.Catalog.ExportForPart(ctx, p.ExportID, p.Epoch, p.Part)
	if err != nil {
		return executor.Permanent(err)
	}
	if err := x.stillHeld(ctx, e.ID, p.Epoch, coordinator); err != nil {
		return err
	}
	var planned []parquetcopy.Column
	if err := json.Unmarshal(e.Columns, &planned); err != nil {
		return executor.Permanent(fmt.Errorf("export %d columns: %w", e.ID, err))
	}

	o, err := executor.TaskOwner(t)
	if err != nil {
		return err
	}
	conn, err := x.Pools.OwnerConn(ctx, o)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT set_config('application_name', $1, false)`, executor.ApplicationName(t.ID, t.Token)); err != nil {
		return err
	}
	if err := waitForReplay(ctx, conn.Conn(), *e.ConsistencyLSN); err != nil {
		return err
	}
	table := identifier(e.Partition)
	cols, err := parquetcopy.Columns(ctx, conn.Conn().PgConn(), table)
	if err != nil {
		return err
	}
	if !slices.Equal(cols, planned) {
		return executor.Permanent(fmt.Errorf("the columns of %s on %s differ from those planned", e.Partition, *t.Node))
	}

	bucket, err := OpenDestination(ctx, e.Destination)
	if err != nil {
		return executor.Permanent(err)
	}
	defer bucket.Close()
	end := int64(-1)
	if part.EndPage != nil {
		end = *part.EndPage
	}
	stats, err := x.write(ctx, conn.Conn(), bucket, part.ObjectKey, parquetcopy.CopySQL(table, cols, part.StartPage, end), cols, e.Compression)
	if err != nil {
		return err
	}
	// What was read is consistent only if the point was held throughout.
	if err := x.stillHeld(ctx, e.ID, p.Epoch, coordinator); err != nil {
		return err
	}
	err = x.Catalog.RecordExportPart(ctx, e.ID, p.Epoch, p.Part, t.Token, *t.Node, stats.Rows, stats.Bytes, hex.EncodeToString(stats.SHA256[:]))
	if errors.Is(err, catalog.ErrStaleAttempt) {
		return executor.Permanent(err)
	}
	return err
}

func (x Part) write(ctx context.Context, conn *pgx.Conn, bucket *blob.Bucket, key, copySQL string,
	cols []parquetcopy.Column, compression string) (parquetcopy.Stats, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // an unfinished writer is discarded, never committed as a partial object
	w, err := bucket.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		return parquetcopy.Stats{}, storageError("open "+key, err)
	}
	stats, err := parquetcopy.Write(ctx, conn.PgConn(), copySQL, cols, w, parquetcopy.Options{Compression: compression})
	if err != nil {
		cancel()
		w.Close() //nolint:errcheck
		return stats, err
	}
	if err := w.Close(); err != nil {
		return stats, storageError("write "+key, err)
	}
	return stats, nil
}

func storageError(what string, err error) error {
	if permanentStorageError(err) {
		return executor.Permanent(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (x Part) stillHeld(ctx context.Context, exportID int64, epoch int, coordinator int64) error {
	current, alive, err := x.Catalog.CurrentEpoch(ctx, exportID, coordinator)
	if err != nil {
		return err
	}
	// Without its coordinator the point is not held; the coordinator's next attempt takes a
	// new one and adds new parts, so this one is superseded either way.
	if current != epoch || !alive {
		return executor.Superseded(errSuperseded)
	}
	return nil
}

// waitForReplay returns once the node's data includes every commit up to lsn: at once on a
// primary, after replay catches up on a standby.
func waitForReplay(ctx context.Context, conn *pgx.Conn, lsn string) error {
	deadline := time.Now().Add(replayWait)
	for {
		var ready bool
		err := conn.QueryRow(ctx, `
			SELECT NOT pg_is_in_recovery() OR coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, lsn).Scan(&ready)
		if err != nil || ready {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standby has not replayed up to the consistency point %s after %s", lsn, replayWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
