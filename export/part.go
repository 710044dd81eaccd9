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

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// Part runs the "export_part" task: one page range to one Parquet file, on whichever member
// of the group the claim chose.
type Part struct {
	Catalog *catalog.Catalog
	Pools   *nodeconn.Pools
}

var errSuperseded = errors.New("superseded: the export's coordinator no longer holds this consistency point")

func (x Part) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	var p partPayload
	if err := json.Unmarshal(t.Payload, &p); err != nil || p.ExportID == 0 {
		return taskerr.Permanent(fmt.Errorf("export part payload: %v", err))
	}
	owner, err := nodeconn.TaskOwner(t)
	if err != nil {
		return err
	}
	e, part, coordinator, err := x.Catalog.ExportForPart(ctx, p.ExportID, p.Epoch, p.Part)
	if err != nil {
		return taskerr.Permanent(err)
	}
	// A part is the task its export's plan recorded for it, in the export's own job: a task
	// naming some other export borrows neither its relation nor its destination.
	if e.JobID != t.JobID || part.TaskID == nil || *part.TaskID != t.ID {
		return taskerr.Permanent(fmt.Errorf("task %d is not part %d of export %d", t.ID, p.Part, e.ID))
	}
	rel, err := x.Catalog.ExportRelationOf(ctx, e.ID)
	if err != nil {
		return err
	}
	if rel == nil || e.ConsistencyLSN == nil {
		return taskerr.Permanent(fmt.Errorf("export %d has no planned relation or consistency point", e.ID))
	}
	if _, err := parseNormal(e.Destination); err != nil {
		return taskerr.Permanent(err)
	}
	if err := x.stillHeld(ctx, e.ID, p.Epoch, coordinator); err != nil {
		return err
	}
	var planned []parquetcopy.Column
	if err := json.Unmarshal(e.Columns, &planned); err != nil {
		return taskerr.Permanent(fmt.Errorf("export %d columns: %w", e.ID, err))
	}

	// The session is the owner's, and only once the node confirmed that the job's submitter
	// may act as the owner; nothing is read or written before.
	conn, err := x.Pools.OwnerConn(ctx, owner)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.set_config('application_name'::pg_catalog.text, $1::pg_catalog.text, false)`,
		nodeconn.ApplicationName(t.ID, t.Token)); err != nil {
		return err
	}
	if err := waitForReplay(ctx, conn.Conn(), *e.ConsistencyLSN); err != nil {
		return err
	}
	if err := x.descendsFromPoint(ctx, conn.Conn(), e.ID, coordinator, owner.Node); err != nil {
		return err
	}
	var stats parquetcopy.Stats
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var readErr error
		stats, readErr = x.read(ctx, tx.Conn(), e, part, *rel, planned, owner.Node)
		return readErr
	})
	if err != nil {
		return err
	}
	// What was read is consistent only if the point was held throughout.
	if err := x.stillHeld(ctx, e.ID, p.Epoch, coordinator); err != nil {
		return err
	}
	if err := x.onPointsHistory(ctx, conn.Conn(), e.ID, p.Epoch, coordinator, owner); err != nil {
		return err
	}
	err = x.Catalog.RecordExportPart(ctx, e.ID, p.Epoch, p.Part, t.Token, owner.Node, stats.Rows, stats.Bytes, hex.EncodeToString(stats.SHA256[:]))
	if errors.Is(err, catalog.ErrStaleAttempt) {
		return taskerr.Permanent(err)
	}
	return err
}

// read copies the part's pages of the export's relation to its object, in a read-only
// transaction of the owner's session. The relation is the one the coordinator resolved, by
// OID: the name is locked, then checked to still be that OID.
func (x Part) read(ctx context.Context, conn *pgx.Conn, e *deckhandtype.Export, part *catalog.ExportPart,
	rel catalog.ExportRelation, planned []parquetcopy.Column, node string) (parquetcopy.Stats, error) {
	if _, err := conn.Exec(ctx, pinSearchPathSQL, true); err != nil {
		return parquetcopy.Stats{}, err
	}
	if err := sameRelation(ctx, conn, rel, node); err != nil {
		return parquetcopy.Stats{}, err
	}
	if _, err := conn.Exec(ctx, "LOCK TABLE ONLY "+rel.Identifier().Sanitize()+" IN ACCESS SHARE MODE"); err != nil {
		return parquetcopy.Stats{}, err
	}
	if err := sameRelation(ctx, conn, rel, node); err != nil {
		return parquetcopy.Stats{}, err
	}
	cols, err := parquetcopy.ColumnsOf(ctx, conn.PgConn(), rel.OID)
	if err != nil {
		return parquetcopy.Stats{}, err
	}
	if !slices.Equal(cols, planned) {
		return parquetcopy.Stats{}, taskerr.Permanent(fmt.Errorf("the columns of %s on %s differ from those planned", e.Partition, node))
	}
	bucket, err := OpenDestination(ctx, e.Destination)
	if err != nil {
		return parquetcopy.Stats{}, taskerr.Permanent(err)
	}
	defer bucket.Close()
	end := int64(-1)
	if part.EndPage != nil {
		end = *part.EndPage
	}
	copySQL := parquetcopy.CopySQL(rel.Identifier(), cols, part.StartPage, end)
	return x.write(ctx, conn, bucket, part.ObjectKey, copySQL, cols, e.Compression)
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

func (x Part) stillHeld(ctx context.Context, exportID int64, epoch int, coordinator int64) error {
	current, alive, err := x.Catalog.CurrentEpoch(ctx, exportID, coordinator)
	if err != nil {
		return err
	}
	// Without its coordinator the point is not held; the coordinator's next attempt takes a
	// new one and adds new parts, so this one is superseded either way.
	if current != epoch || !alive {
		return taskerr.Superseded(errSuperseded)
	}
	return nil
}

// descendsFromPoint refuses to read on a primary other than the one the coordinator holds the
// consistency point on. A group has one primary: a standby replays the primary's WAL, so
// past the point it holds exactly the rows the point holds; but a second server that answers
// as primary (a standby promoted while the old primary still runs, a split brain) has its
// own history, and "a primary has replayed everything" does not hold of it. Reading there
// would commit a mix of two servers' rows; the export fails instead, saying why.
func (x Part) descendsFromPoint(ctx context.Context, conn *pgx.Conn, exportID, coordinator int64, node string) error {
	var primary bool
	if err := conn.QueryRow(ctx, `SELECT NOT pg_catalog.pg_is_in_recovery()`).Scan(&primary); err != nil || !primary {
		return err
	}
	holder, err := x.Catalog.CoordinatorNode(ctx, exportID, coordinator)
	if err != nil || holder == node {
		return err
	}
	if holder == "" {
		return taskerr.Superseded(errSuperseded)
	}
	return taskerr.Permanent(fmt.Errorf("node %s answers as a primary, but the export's consistency point is held on %s, "+
		"the primary of its group: a group with two primaries (a standby promoted while the old primary runs) has two "+
		"histories, and the export does not mix them", node, holder))
}

// onPointsHistory refuses what was read on a member that is not on the history of the
// primary holding the consistency point. A standby past the point's position holds the point's
// rows only while it replays that primary's WAL: one whose upstream was promoted while that
// primary still ran (a split brain; the promoted server need not be a node of the group)
// follows a history of its own past the fork, with rows that differ at the same positions.
// Asked after the read: a member promoted meanwhile is a second primary (descendsFromPoint),
// and a standby's timeline only grows, so the one it has now bounds the one it read on.
func (x Part) onPointsHistory(ctx context.Context, conn *pgx.Conn, exportID int64, epoch int, coordinator int64, owner nodeconn.Owner) error {
	if err := x.descendsFromPoint(ctx, conn, exportID, coordinator, owner.Node); err != nil {
		return err
	}
	var standby bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&standby); err != nil || !standby {
		return err
	}
	want, err := x.Catalog.ExportTimeline(ctx, exportID, epoch)
	if err != nil || want == 0 {
		return err
	}
	got, err := nodeconn.StandbyTimeline(ctx, x.Pools, owner.DSN)
	if err != nil {
		return err
	}
	if got != want {
		return taskerr.Permanent(fmt.Errorf("standby %s replays timeline %d, but the export's consistency point was taken on "+
			"timeline %d: its upstream was promoted while the primary holding the point still runs, a history of its own, "+
			"and the export does not mix two histories", owner.Node, got, want))
	}
	return nil
}

// replayedSQL: the node's data includes every commit up to $1 (at once on a primary). It runs
// outside any transaction, before the search_path is pinned: every name is qualified.
const replayedSQL = `
	SELECT NOT pg_catalog.pg_is_in_recovery()
	    OR COALESCE(pg_catalog.pg_last_wal_replay_lsn() OPERATOR(pg_catalog.>=) $1::pg_catalog.pg_lsn, false)`

// waitForReplay returns once the node's data includes every commit up to lsn: at once on a
// primary, after replay catches up on a standby.
func waitForReplay(ctx context.Context, conn *pgx.Conn, lsn string) error {
	deadline := time.Now().Add(replayWait)
	for {
		var ready bool
		err := conn.QueryRow(ctx, replayedSQL, lsn).Scan(&ready)
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
