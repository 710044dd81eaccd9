package logicalapply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// pipelineDepth is how many statements are sent to the target in one round trip.
const pipelineDepth = 256

// txn is an open target transaction: one or more consecutive source transactions, and the
// statements queued for the next round trip.
type txn struct {
	opened  time.Time
	batch   *pgx.Batch
	items   []item // what each queued statement is, for its result and its errors
	changes int
	txs     int           // source transactions committed into it
	end     pglogrepl.LSN // end of the last of them

	toast, missingUpdates, missingDeletes int64
}

type itemKind int

const (
	itemPlain    itemKind = iota
	itemLock              // the progress row: must hold run.progress
	itemProgress          // the progress row's update: must find it
	itemUpdate            // counts updates that found no row
	itemDelete            // counts deletes that found no row
)

// item describes a queued statement.
type item struct {
	op     string
	rel    *relation
	lsn    pglogrepl.LSN
	commit pglogrepl.LSN
	kind   itemKind
}

// begin opens a target transaction: it locks the progress row and checks that it holds what
// this run last wrote, so that two appliers never interleave, and defers what can wait until
// the commit.
func (r *run) begin(ctx context.Context) error {
	r.txn = &txn{opened: r.a.now(), batch: &pgx.Batch{}}
	lockTimeout := strconv.FormatInt(r.a.cfg.LockTimeout.Milliseconds(), 10) + "ms"
	for _, q := range []struct {
		it   item
		sql  string
		args []any
	}{
		{item{op: "BEGIN"}, r.stmts.begin, nil},
		{item{op: "set lock_timeout"}, r.stmts.limit, []any{lockTimeout}},
		{item{op: "SET CONSTRAINTS"}, r.stmts.defer_, nil},
		{item{op: "lock the progress row", kind: itemLock}, r.stmts.lock, nil},
	} {
		if err := r.queue(ctx, q.it, q.sql, q.args...); err != nil {
			return err
		}
	}
	return r.flush(ctx)
}

// commit writes the progress row and commits the target transaction, then reports the
// position (Config.Applied) and makes it the applied one.
func (r *run) commit(ctx context.Context) error {
	t := r.txn
	if err := r.queue(ctx, item{op: "update the progress row", kind: itemProgress, commit: t.end}, r.stmts.update,
		t.end.String(), r.progress.String()); err != nil {
		return err
	}
	if err := r.queue(ctx, item{op: "COMMIT", commit: t.end}, r.stmts.commit); err != nil {
		return err
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	r.txn = nil
	r.a.log.Debug("target commit", "end", t.end, "txs", t.txs, "changes", t.changes)
	r.progress = t.end
	s := &r.a.stats
	s.commits.Add(1)
	s.transactions.Add(int64(t.txs))
	s.changes.Add(int64(t.changes))
	s.toast.Add(t.toast)
	s.missingUpdates.Add(t.missingUpdates)
	s.missingDeletes.Add(t.missingDeletes)
	if t.missingUpdates > 0 {
		r.a.log.Warn("logical apply: updates found no row on the target", "count", t.missingUpdates, "until", t.end.String())
	}
	if err := r.report(ctx, t.end); err != nil {
		return err
	}
	r.a.advance(t.end)
	return nil
}

// rollback ends an open target transaction after a failure; a lost connection ends it anyway.
func (r *run) rollback(ctx context.Context) {
	if r.txn == nil {
		return
	}
	r.txn = nil
	if r.dst.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := r.dst.Exec(ctx, "ROLLBACK"); err != nil {
		r.a.log.Warn("logical apply: rollback on the target", "err", err)
	}
}

// queue adds a statement to the next round trip, prepared once per connection.
func (r *run) queue(ctx context.Context, it item, sql string, args ...any) error {
	name, err := r.prepare(ctx, sql)
	if err != nil {
		e := &ApplyError{Op: "prepare " + it.op, LSN: it.lsn, CommitLSN: it.commit, Err: err}
		if it.rel != nil {
			e.Relation = it.rel.display
		}
		return targetError(e)
	}
	r.txn.batch.Queue(name, args...)
	r.txn.items = append(r.txn.items, it)
	return nil
}

// prepare prepares sql on the target under a name derived from it, once per connection.
func (r *run) prepare(ctx context.Context, sql string) (string, error) {
	if name, ok := r.named[sql]; ok {
		return name, nil
	}
	sum := sha256.Sum256([]byte(sql))
	name := "logicalapply_" + hex.EncodeToString(sum[:12])
	if _, err := r.dst.Prepare(ctx, name, sql); err != nil {
		return "", err
	}
	r.named[sql] = name
	return name, nil
}

// flush sends the queued statements in one round trip and checks each result.
func (r *run) flush(ctx context.Context) error {
	t := r.txn
	if len(t.items) == 0 {
		return nil
	}
	items := t.items
	br := r.dst.SendBatch(ctx, t.batch)
	t.batch, t.items = &pgx.Batch{}, nil
	var failed error
	for _, it := range items {
		if err := r.result(br, it); err != nil {
			failed = err
			break
		}
	}
	if err := br.Close(); err != nil && failed == nil {
		failed = targetError(&ApplyError{Op: "send", Err: err})
	}
	return failed
}

// result reads one statement's result.
func (r *run) result(br pgx.BatchResults, it item) error {
	fail := func(err error) error {
		e := &ApplyError{Op: it.op, LSN: it.lsn, CommitLSN: it.commit, Err: err}
		if it.rel != nil {
			e.Relation = it.rel.display
		}
		return targetError(e)
	}
	if it.kind == itemLock {
		var s string
		if err := br.QueryRow().Scan(&s); err != nil {
			return fail(err)
		}
		if lsn, err := pglogrepl.ParseLSN(s); err != nil || lsn != r.progress {
			return r.conflict(s)
		}
		return nil
	}
	ct, err := br.Exec()
	if err != nil {
		return fail(err)
	}
	switch it.kind {
	case itemProgress:
		if ct.RowsAffected() != 1 {
			return r.conflict("another position")
		}
	case itemUpdate:
		if ct.RowsAffected() == 0 {
			r.txn.missingUpdates++
		}
	case itemDelete:
		if ct.RowsAffected() == 0 {
			r.txn.missingDeletes++
		}
	}
	return nil
}

// conflict is the progress row holding something this run did not write: another applier
// moved it. A new run starts from what the target holds.
func (r *run) conflict(holds string) error {
	return fmt.Errorf("logicalapply: the progress table %s holds %s, not %s: another applier wrote it; run again",
		r.a.cfg.ProgressTable.Sanitize(), holds, r.progress)
}
