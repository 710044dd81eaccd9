package logicalapply

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// slotName is what PostgreSQL allows as a replication slot's name; START_REPLICATION takes it
// unquoted.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// pollInterval paces the run's housekeeping: asking an idle source for its position while a
// WaitApplied waits, and status updates.
const pollInterval = 20 * time.Millisecond

// run is the state of one Run: its connections, the relations the stream described, and the
// open target transaction.
type run struct {
	a     *Applier
	src   *pgconn.PgConn
	dst   *pgx.Conn
	stmts progressStatements
	rels  map[uint32]*relation
	named map[string]string // prepared statement names by SQL

	progress  pglogrepl.LSN // what the progress table holds, as this run last read or wrote it
	confirmed pglogrepl.LSN // the highest position passed to Config.Applied: what the source may hear
	sent      pglogrepl.LSN // the position the source last heard
	sentAt    time.Time

	inTx      bool          // between a source BEGIN and its COMMIT
	skip      bool          // the open source transaction is already applied
	commitLSN pglogrepl.LSN // the open source transaction's commit record
	txn       *txn          // the open target transaction, if any
}

// Run streams the slot's changes from start (or from the progress table's position, if
// later) and applies them on the target until ctx ends (returning ctx's error) or something
// fails: a change the target refuses is a permanent *ApplyError (taskerr.Permanent); a lost
// connection, a failed Config.Applied and the like are plain errors, after which the caller
// calls Use with new connections and Run again, which resumes exactly where the target is.
// start is max(AppliedLSN, the slot's consistent point). Run leaves the source connection
// streaming: close it afterwards. Only one Run at a time.
func (a *Applier) Run(ctx context.Context, start pglogrepl.LSN) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("logicalapply: Run is already running")
	}
	defer a.running.Store(false)
	cfg := a.cfg
	switch {
	case cfg.Source == nil || cfg.Target == nil:
		return taskerr.Permanent(errors.New("logicalapply: Run needs a source and a target connection"))
	case !slotName.MatchString(cfg.Slot):
		return taskerr.Permanent(fmt.Errorf("logicalapply: %q is not a replication slot name", cfg.Slot))
	case cfg.Publication == "":
		return taskerr.Permanent(errors.New("logicalapply: no publication"))
	case cfg.Target.Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol:
		return taskerr.Permanent(errors.New("logicalapply: the target connection must use the extended protocol"))
	}
	if err := checkProgressTable(cfg.ProgressTable); err != nil {
		return taskerr.Permanent(err)
	}
	r := &run{a: a, src: cfg.Source, dst: cfg.Target, stmts: newProgressStatements(cfg.ProgressTable),
		rels: map[uint32]*relation{}, named: map[string]string{}}
	err := r.run(ctx, start)
	if ctx.Err() != nil {
		return ctx.Err() // whatever the cancellation interrupted
	}
	return err
}

func (r *run) run(ctx context.Context, start pglogrepl.LSN) error {
	a := r.a
	progress, err := AppliedLSN(ctx, r.dst, a.cfg.ProgressTable)
	if err != nil {
		if transient(err) {
			return err
		}
		return taskerr.Permanent(err)
	}
	// Type names are resolved (format_type) and used under this search_path: nothing another
	// role creates in a schema on the caller's path can stand in for what the applier names.
	if _, err := r.dst.Exec(ctx, `SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)`); err != nil {
		return err
	}
	r.progress = progress
	if progress > 0 {
		if err := r.report(ctx, progress); err != nil {
			return err
		}
	}
	from := max(start, progress)
	a.advance(from)

	// The publication's name goes into a string literal holding a list of identifiers.
	pub := strings.ReplaceAll(pgx.Identifier{a.cfg.Publication}.Sanitize(), "'", "''")
	streamAt := from
	if a.streamFromSlot {
		streamAt = 0 // the slot's confirmed position
	}
	err = pglogrepl.StartReplication(ctx, r.src, a.cfg.Slot, streamAt, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	})
	if err != nil {
		return sourceError(err)
	}
	a.log.Info("logical apply streaming", "slot", a.cfg.Slot, "from", from.String(), "progress", progress.String())

	// The reader receives while the loop applies: the source keeps streaming while the target
	// works, and the loop sees what is already waiting (len(msgs)) to batch transactions.
	rctx, cancel := context.WithCancel(ctx)
	msgs := make(chan []byte, 1024)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- r.receive(rctx, msgs)
	}()
	defer func() {
		cancel()
		wg.Wait()
		// Best effort, once the receiver has stopped touching the connection (a receiver that
		// failed may have closed it): the slot may let go of what is applied. Nothing depends
		// on it: the next run confirms from the target's progress row.
		if r.sent != r.confirmed && !r.src.IsClosed() {
			_ = r.status(false)
		}
		r.rollback(ctx)
	}()

	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if r.txn != nil && len(msgs) == 0 {
			// Nothing waiting: commit what is applied, or send what is queued.
			if !r.inTx {
				if err := r.commit(ctx); err != nil {
					return err
				}
			} else if len(r.txn.items) > 0 {
				if err := r.flush(ctx); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return sourceError(err)
		case data := <-msgs:
			if err := r.handle(ctx, data); err != nil {
				return err
			}
		case <-ticker.C:
			if err := r.housekeeping(); err != nil {
				return err
			}
		case <-a.poke:
			if err := r.housekeeping(); err != nil {
				return err
			}
		}
	}
}

// receive copies the stream's messages to msgs until the stream or ctx ends.
func (r *run) receive(ctx context.Context, msgs chan<- []byte) error {
	for {
		msg, err := r.src.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			// The connection reuses its buffer for the next message.
			buf := make([]byte, len(m.Data))
			copy(buf, m.Data)
			select {
			case msgs <- buf:
			case <-ctx.Done():
				return ctx.Err()
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyDone:
			return errors.New("the source ended the stream")
		}
	}
}

// handle processes one message of the stream.
func (r *run) handle(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return sourceError(err)
		}
		r.a.log.Debug("keepalive", "wal_end", ka.ServerWALEnd, "in_tx", r.inTx, "reply", ka.ReplyRequested, "applied", r.a.Applied())
		if !r.inTx {
			// Every transaction that committed before ServerWALEnd has been received: once
			// the open target transaction commits, the target has applied up to there.
			if r.txn != nil {
				if err := r.commit(ctx); err != nil {
					return err
				}
			}
			if err := r.idle(ctx, ka.ServerWALEnd); err != nil {
				return err
			}
		}
		if ka.ReplyRequested {
			return r.status(false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return sourceError(err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return sourceError(err)
		}
		return r.apply(ctx, xld.WALStart, m)
	}
	return nil
}

// idle takes the source's position as applied: no source transaction is open and the target
// has committed everything received.
func (r *run) idle(ctx context.Context, lsn pglogrepl.LSN) error {
	if lsn <= r.a.Applied() {
		return nil
	}
	if err := r.report(ctx, lsn); err != nil {
		return err
	}
	r.a.advance(lsn)
	return nil
}

// report hands an applied position to Config.Applied; from then on the source may hear it.
func (r *run) report(ctx context.Context, lsn pglogrepl.LSN) error {
	if f := r.a.cfg.Applied; f != nil {
		if err := f(ctx, lsn); err != nil {
			return fmt.Errorf("logicalapply: recording %s as applied: %w", lsn, err)
		}
	}
	if lsn > r.confirmed {
		r.confirmed = lsn
	}
	return nil
}

// housekeeping asks an idle source for its position while a WaitApplied waits, and tells
// the source the confirmed position now and then.
func (r *run) housekeeping() error {
	if !r.inTx && r.txn == nil && r.a.waited() {
		return r.status(true)
	}
	since := r.a.now().Sub(r.sentAt)
	if (r.confirmed != r.sent && since >= time.Second) || since >= r.a.cfg.StatusInterval {
		return r.status(false)
	}
	return nil
}

// status sends a standby status update with the confirmed position; with reply, the source
// answers at once with a keepalive carrying its position.
//
// It writes the message to the network connection itself: the reader goroutine is inside
// the connection's receive meanwhile, and the connection's own buffered writer is not safe
// to use beside it (a failing receive flushes it to close the connection). A net.Conn takes
// a write beside a read, and whole writes one after the other.
func (r *run) status(reply bool) error {
	_, err := r.src.Conn().Write(standbyStatus(r.confirmed, r.a.now(), reply))
	if err != nil {
		return fmt.Errorf("logicalapply: source: standby status: %w", err)
	}
	r.sent, r.sentAt = r.confirmed, r.a.now()
	return nil
}

// pgEpoch is where PostgreSQL's timestamps count from.
var pgEpoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// standbyStatus encodes a standby status update ('r') in a CopyData message: written,
// flushed and applied positions (all lsn), the client's clock, and whether to reply now.
func standbyStatus(lsn pglogrepl.LSN, now time.Time, reply bool) []byte {
	b := make([]byte, 0, 1+4+34)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint32(b, 4+34)
	b = append(b, pglogrepl.StandbyStatusUpdateByteID)
	for range 3 {
		b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(now.Sub(pgEpoch).Microseconds()))
	if reply {
		return append(b, 1)
	}
	return append(b, 0)
}
