package logicalapply

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
)

// apply processes one logical replication message at position lsn.
func (r *run) apply(ctx context.Context, lsn pglogrepl.LSN, msg pglogrepl.Message) error {
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		// Sent before a relation's first change in each stream and after it changed.
		r.rels[m.RelationID] = newRelation(m)
		return nil
	case *pglogrepl.BeginMessage:
		r.inTx, r.commitLSN = true, m.FinalLSN
		// The progress position is the end of a commit record: a transaction whose commit
		// record starts before it is on the target already.
		r.skip = m.FinalLSN < r.a.Applied()
		r.a.log.Debug("begin", "final", m.FinalLSN, "skip", r.skip, "xid", m.Xid)
		if r.skip {
			return nil
		}
		if r.txn == nil {
			return r.begin(ctx)
		}
		return nil
	case *pglogrepl.CommitMessage:
		if !r.inTx {
			return sourceError(fmt.Errorf("COMMIT at %s outside a transaction", m.CommitLSN))
		}
		r.inTx = false
		if r.skip {
			r.skip = false
			r.a.stats.skipped.Add(1)
			return nil
		}
		r.txn.end = m.TransactionEndLSN
		r.txn.txs++
		r.a.log.Debug("commit", "lsn", m.CommitLSN, "end", m.TransactionEndLSN, "changes", r.txn.changes)
		if r.txn.changes >= r.a.cfg.MaxBatchChanges || r.a.now().Sub(r.txn.opened) >= r.a.cfg.MaxBatchDelay {
			return r.commit(ctx)
		}
		return nil
	case *pglogrepl.InsertMessage:
		return r.change(ctx, lsn, "INSERT", m.RelationID, func(rel *relation) error { return r.insert(ctx, lsn, rel, m) })
	case *pglogrepl.UpdateMessage:
		return r.change(ctx, lsn, "UPDATE", m.RelationID, func(rel *relation) error { return r.update(ctx, lsn, rel, m) })
	case *pglogrepl.DeleteMessage:
		return r.change(ctx, lsn, "DELETE", m.RelationID, func(rel *relation) error { return r.delete(ctx, lsn, rel, m) })
	case *pglogrepl.TruncateMessage:
		if r.skip {
			return nil
		}
		return r.truncate(ctx, lsn, m)
	}
	// Origin, type and logical decoding messages change nothing on the target.
	return nil
}

// change applies one row change of relation id with do, unless the transaction is skipped.
func (r *run) change(ctx context.Context, lsn pglogrepl.LSN, op string, id uint32, do func(*relation) error) error {
	if r.skip {
		return nil
	}
	if !r.inTx {
		return sourceError(fmt.Errorf("%s at %s outside a transaction", op, lsn))
	}
	rel, err := r.relation(ctx, lsn, op, id)
	if err != nil {
		return err
	}
	if err := do(rel); err != nil {
		return err
	}
	r.txn.changes++
	if len(r.txn.items) >= pipelineDepth {
		return r.flush(ctx)
	}
	return nil
}

// relation returns relation id, resolved against the target.
func (r *run) relation(ctx context.Context, lsn pglogrepl.LSN, op string, id uint32) (*relation, error) {
	rel, ok := r.rels[id]
	if !ok {
		return nil, sourceError(fmt.Errorf("%s at %s of relation %d, which the stream never described", op, lsn, id))
	}
	if !rel.resolved {
		if err := rel.resolve(ctx, r.dst); err != nil {
			return nil, targetError(&ApplyError{Op: "resolve", Relation: rel.display, LSN: lsn, CommitLSN: r.commitLSN, Err: err})
		}
	}
	return rel, nil
}

// text is a tuple column's value as a statement argument: its text form, or nil for NULL.
func text(c *pglogrepl.TupleDataColumn) any {
	if c.DataType == pglogrepl.TupleDataTypeNull {
		return nil
	}
	return string(c.Data)
}

func (r *run) tupleError(op string, rel *relation, lsn pglogrepl.LSN, format string, args ...any) error {
	return targetError(&ApplyError{Op: op, Relation: rel.display, LSN: lsn, CommitLSN: r.commitLSN, Err: refused(format, args...)})
}

func (r *run) insert(ctx context.Context, lsn pglogrepl.LSN, rel *relation, m *pglogrepl.InsertMessage) error {
	if m.Tuple == nil || len(m.Tuple.Columns) != len(rel.cols) {
		return r.tupleError("INSERT", rel, lsn, "the row has %d columns, the relation %d", tupleLen(m.Tuple), len(rel.cols))
	}
	args := make([]any, len(rel.cols))
	for i, c := range m.Tuple.Columns {
		if c.DataType == pglogrepl.TupleDataTypeToast {
			return r.tupleError("INSERT", rel, lsn, "column %q: an inserted row without its value", rel.cols[i])
		}
		args[i] = text(c)
	}
	return r.queue(ctx, item{op: "INSERT", rel: rel, lsn: lsn, commit: r.commitLSN}, rel.insert, args...)
}

func (r *run) update(ctx context.Context, lsn pglogrepl.LSN, rel *relation, m *pglogrepl.UpdateMessage) error {
	n := len(rel.cols)
	if m.NewTuple == nil || len(m.NewTuple.Columns) != n {
		return r.tupleError("UPDATE", rel, lsn, "the row has %d columns, the relation %d", tupleLen(m.NewTuple), n)
	}
	// The row's key: the old one if the source sent it (the key changed, or replica identity
	// FULL), else the new row's.
	keyTuple := m.NewTuple
	if m.OldTuple != nil {
		if len(m.OldTuple.Columns) != n {
			return r.tupleError("UPDATE", rel, lsn, "the old key has %d columns, the relation %d", len(m.OldTuple.Columns), n)
		}
		keyTuple = m.OldTuple
	}
	keyArgs, err := r.key(rel, lsn, "UPDATE", keyTuple)
	if err != nil {
		return err
	}
	isKey := make([]bool, n)
	for _, i := range rel.key {
		isKey[i] = true
	}
	set := make([]byte, n)
	var args []any
	for i, c := range m.NewTuple.Columns {
		switch {
		case c.DataType == pglogrepl.TupleDataTypeToast:
			// Unchanged TOASTed value: the source did not send it, the target keeps its own.
			r.txn.toast++
		case isKey[i] && m.OldTuple == nil:
			// The key did not change.
		default:
			set[i] = 1
			args = append(args, text(c))
		}
	}
	if len(args) == 0 {
		return nil // nothing the target does not have already
	}
	args = append(args, keyArgs...)
	return r.queue(ctx, item{op: "UPDATE", rel: rel, lsn: lsn, commit: r.commitLSN, kind: itemUpdate}, rel.update(set), args...)
}

func (r *run) delete(ctx context.Context, lsn pglogrepl.LSN, rel *relation, m *pglogrepl.DeleteMessage) error {
	if m.OldTuple == nil || len(m.OldTuple.Columns) != len(rel.cols) {
		return r.tupleError("DELETE", rel, lsn, "the old key has %d columns, the relation %d", tupleLen(m.OldTuple), len(rel.cols))
	}
	keyArgs, err := r.key(rel, lsn, "DELETE", m.OldTuple)
	if err != nil {
		return err
	}
	return r.queue(ctx, item{op: "DELETE", rel: rel, lsn: lsn, commit: r.commitLSN, kind: itemDelete}, rel.delete, keyArgs...)
}

// key returns the values of rel's key columns in t.
func (r *run) key(rel *relation, lsn pglogrepl.LSN, op string, t *pglogrepl.TupleData) ([]any, error) {
	if len(rel.key) == 0 {
		return nil, r.tupleError(op, rel, lsn, "the table has no primary key (or replica identity index) on the target")
	}
	args := make([]any, len(rel.key))
	for j, i := range rel.key {
		c := t.Columns[i]
		if c.DataType != pglogrepl.TupleDataTypeText {
			return nil, r.tupleError(op, rel, lsn, "the source sent no value for key column %q: its replica identity differs from the target's key", rel.cols[i])
		}
		args[j] = string(c.Data)
	}
	return args, nil
}

func (r *run) truncate(ctx context.Context, lsn pglogrepl.LSN, m *pglogrepl.TruncateMessage) error {
	var names, display []string
	for _, id := range m.RelationIDs {
		rel, err := r.relation(ctx, lsn, "TRUNCATE", id)
		if err != nil {
			return err
		}
		names = append(names, rel.quoted)
		display = append(display, rel.display)
	}
	sql := "TRUNCATE " + strings.Join(names, ", ")
	if m.Option&pglogrepl.TruncateOptionRestartIdentity != 0 {
		sql += " RESTART IDENTITY"
	}
	if m.Option&pglogrepl.TruncateOptionCascade != 0 {
		sql += " CASCADE"
	}
	it := item{op: "TRUNCATE", rel: &relation{display: strings.Join(display, ", ")}, lsn: lsn, commit: r.commitLSN}
	if err := r.queue(ctx, it, sql); err != nil {
		return err
	}
	r.txn.changes++
	return nil
}

func tupleLen(t *pglogrepl.TupleData) int {
	if t == nil {
		return 0
	}
	return len(t.Columns)
}
