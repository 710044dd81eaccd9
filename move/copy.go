package move

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// replicationConn opens a replication connection (replication=database) to the source as the
// owner. It cannot be pooled; it is the owner's on the node whose owner session of the same
// attempt passed OwnerConn's check, and it runs only replication commands.
func replicationConn(ctx context.Context, o nodeconn.Owner, t *deckhandtype.ClaimedTask) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(nodeconn.WithUser(o.DSN, o.Role))
	if err != nil || cfg.User != o.Role {
		return nil, taskerr.Permanent(errors.New("node conninfo cannot be parsed"))
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["search_path"] = nodeconn.SafeSearchPath
	cfg.RuntimeParams["application_name"] = nodeconn.ApplicationName(t.ID, t.Token)
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to node %s as %s: %w", o.Node, o.Role, err)
	}
	return conn, nil
}

// createSlot creates the logical slot (pgoutput) on conn, exporting a snapshot: the copy
// reads exactly the rows the slot's changes start after. conn must then stay open, and run
// nothing else, until every copy session has imported the snapshot.
func createSlot(ctx context.Context, conn *pgconn.PgConn, name string) (snapshot string, start pglogrepl.LSN, err error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, pgx.Identifier{name}.Sanitize(), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return "", 0, err
	}
	start, err = pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return "", 0, err
	}
	return res.SnapshotName, start, nil
}

// sessionFunc opens a session of the attempt's owner on a node; release gives it back.
type sessionFunc func(ctx context.Context) (*pgx.Conn, func(), error)

// copyTables copies the tables' rows under the exported snapshot, parallel sessions at a
// time, each table from a source session that imported the snapshot into a target session,
// in binary COPY. The target tables are empty (created by this attempt).
func copyTables(ctx context.Context, src, dst sessionFunc, snapshot string, tables []relation, parallel int,
	copied func(rel relation, rows int64)) error {
	g, ctx := errgroup.WithContext(ctx)
	next := atomic.Int64{}
	for range max(1, min(parallel, len(tables))) {
		g.Go(func() error {
			s, releaseS, err := src(ctx)
			if err != nil {
				return err
			}
			defer releaseS()
			d, releaseD, err := dst(ctx)
			if err != nil {
				return err
			}
			defer releaseD()
			// One snapshot import per session: every table it copies sees the same rows.
			srcTx, err := s.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				return err
			}
			defer srcTx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			if _, err := srcTx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+literal(snapshot)); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "22023" {
					// The replication connection that exported it is gone: a new attempt
					// makes a new slot. Not wrapped, so that it is retried.
					return fmt.Errorf("the slot's snapshot is gone with its replication connection: %v", err)
				}
				return err
			}
			// Row security that applies here fails the copy rather than leaving rows behind.
			if _, err := srcTx.Exec(ctx, `SELECT pg_catalog.set_config('row_security', 'off', true)`); err != nil {
				return err
			}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tables) {
					return nil
				}
				n, err := copyTable(ctx, s, d, tables[i])
				if err != nil {
					return fmt.Errorf("copy %s: %w", tables[i].ident(), err)
				}
				copied(tables[i], n)
			}
		})
	}
	return g.Wait()
}

// copyChunk is how much of a table's rows crosses from the source to the target at a time.
const copyChunk = 256 << 10

// copyTable streams one table from src (in the snapshot's transaction) into dst, committed on
// dst in a transaction of its own. Generated columns are left to the target to compute.
func copyTable(ctx context.Context, src, dst *pgx.Conn, rel relation) (int64, error) {
	rows, _ := src.Query(ctx, `
		SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1::pg_catalog.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, rel.OID)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	colList := "(" + strings.Join(quoted, ", ") + ")"
	dstTx, err := dst.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer dstTx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	pr, pw := io.Pipe()
	out := make(chan error, 1)
	go func() {
		// CopyTo writes each row as it comes, and CopyFrom sends whatever one read returns as
		// a message of its own: through the buffer, rows cross the pipe and reach the target
		// in chunks, not one write (and one message) per row.
		buf := bufio.NewWriterSize(pw, copyChunk)
		_, err := src.PgConn().CopyTo(ctx, buf, "COPY "+rel.ident()+" "+colList+" TO STDOUT (FORMAT binary)")
		if err == nil {
			err = buf.Flush()
		}
		pw.CloseWithError(err)
		out <- err
	}()
	tag, err := dst.PgConn().CopyFrom(ctx, pr, "COPY "+rel.ident()+" "+colList+" FROM STDIN (FORMAT binary)")
	pr.CloseWithError(errors.New("copy into the target ended"))
	if srcErr := <-out; srcErr != nil && (err == nil || errors.Is(err, io.ErrClosedPipe)) {
		err = srcErr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), dstTx.Commit(ctx)
}
