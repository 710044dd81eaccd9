package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// sqlExecutor runs a task's SQL text on its node, connected as its owner, with the job's
// search_path and settings, in a transaction unless the task says otherwise.
//
// A transactional task takes two round trips to the node (nodeconn.TaskTransaction): the
// owner's check, the session's set-up with BEGIN, the task's SQL and a statement that reads
// the transaction's id in one query string; then COMMIT with the session's reset. Between the
// two, when the transaction wrote anything (then it has an id), the id is made durable in the
// catalog: should the worker die after the node committed
// and before the result reached the catalog, whoever rescues the attempt asks the node whether
// it committed instead of running it again — exactly once. A transaction that wrote nothing has
// no id, and running it again changes nothing. A task run outside a transaction is at least
// once: what a lost attempt did is unknown.
type sqlExecutor struct {
	pools  *nodeconn.Pools
	xacts  xactRecorder
	killed <-chan struct{} // the worker's shutdown cancelled its tasks
	nodes  nodeRegistry    // nil: not consulted
}

// nodeRegistry says how the catalog registers nodes now.
type nodeRegistry interface {
	NodesByName(ctx context.Context, names []string) (map[string]deckhandtype.Node, error)
}

// xactRecorder makes an attempt's node transaction id durable in the catalog before it commits.
type xactRecorder interface {
	Record(ctx context.Context, t *deckhandtype.ClaimedTask, x nodeconn.Xact) error
}

// afterNodeCommit runs right after a task's work committed on its node (its transaction, or
// its statements outside one), before its result is recorded: a test build kills the process
// there (faults_faultinject.go).
var afterNodeCommit = func(*deckhandtype.ClaimedTask) {}

func (s sqlExecutor) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	o, err := nodeconn.TaskOwner(t)
	if err != nil {
		return err
	}
	// The simple protocol, which runs SQL of several statements.
	if !t.InTransaction {
		conn, release, err := s.pools.TaskSession(ctx, o, t)
		if err != nil {
			return err
		}
		defer release()
		if _, err = readDiscarding(conn.PgConn().Exec(ctx, t.SQL)); err == nil {
			afterNodeCommit(t)
		}
		return explainImplicitTransaction(err)
	}
	// The SQL goes with the session's check and set-up, and is followed by the read of its
	// transaction's id (nodeconn.AttemptXactSQL).
	conn, releaseSession, results, err := s.pools.TaskTransaction(ctx, o, t, readDiscarding)
	if conn == nil {
		return err
	}
	var released sync.Once
	release := func() { released.Do(releaseSession) }
	defer release()
	if err != nil {
		return err
	}
	x, ok, err := attemptXact(conn, results)
	if err != nil {
		return err
	}
	if !ok {
		return taskerr.Permanent(errors.New("the task's SQL does not end with complete statements " +
			"(an unterminated comment, quoted string or dollar quote hides what follows it)"))
	}
	xid := x.XID
	if xid != "" {
		if err := s.xacts.Record(ctx, t, x); err != nil {
			return err
		}
	}
	// The session's reset goes in the COMMIT's round trip.
	err = nodeconn.CommitAndReset(ctx, conn)
	if err == nil {
		afterNodeCommit(t)
		return nil
	}
	if xid == "" || !commitUnknown(err) {
		return err
	}
	// The COMMIT was sent and its answer lost: the node knows what became of it. The session
	// goes back first: asking takes one from the same pool, which holds as many as the worker
	// runs tasks, and a task that kept its own while it asked could wait for ever for another
	// (one slot, or every task on the node asking at once after the node restarted).
	release()
	return s.commitOutcome(ctx, o, x, err)
}

// errCommitUnknown: a COMMIT's answer was lost and the node could not say what became of it
// before the worker's shutdown killed the task. The worker records no result for it.
var errCommitUnknown = errors.New("the COMMIT's answer was lost and the node has not said whether it committed")

// commitOutcome asks the node what became of a transaction whose COMMIT's answer was lost
// (commitErr), until it says: nil when it committed, commitErr when it did not. A node that
// does not answer (it crashed with the connection, and recovers) is asked again with backoff
// for as long as it takes, whatever becomes of the task meanwhile (a cancel, a pause, its
// timeout): taking commitErr for a failure would run the task again, and apply its effect
// twice if it had committed. Only the worker's shutdown ends the asking, with
// errCommitUnknown: the attempt is then the leader's to settle, which asks the node the same
// way before running the task again.
//
// The answer settles the task only when it can be trusted (nodeconn.Judge): from the server,
// on the history, that gave out the id, and while it still keeps the id's commit status.
// Otherwise the task fails, its effect unknown, and does not run again on its own.
func (s sqlExecutor) commitOutcome(ctx context.Context, o nodeconn.Owner, x nodeconn.Xact, commitErr error) error {
	xid := x.XID
	ask := context.WithoutCancel(ctx)
	delay := 100 * time.Millisecond
	// A cancel, a pause or the task's timeout do not end the asking; losing the worker's
	// lease does: the attempt is the leader's rescue's then, which asks the node itself, and
	// what this worker would learn is fenced off. Asking on would only hold the task's slot.
	stopped := ctx.Done()
	for {
		actx, cancel := context.WithTimeout(ask, 15*time.Second)
		answer, err := nodeconn.XactStatus(actx, s.pools, o, xid)
		cancel()
		if err == nil {
			switch outcome, why := nodeconn.Judge(x, o.Node, answer); outcome {
			case nodeconn.Committed:
				return nil
			case nodeconn.NotCommitted:
				// aborted, or unknown to the server the conninfo reaches now (XactFuture: the
				// node failed over before the transaction reached the new primary): it did not
				// commit there, and running the task again is safe
				return commitErr
			case nodeconn.Unknown:
				return taskerr.Permanent(fmt.Errorf("the COMMIT's answer was lost, and its effect is unknown because %s: "+
					"the task does not run again on its own (deckhand job retry runs it again); the COMMIT: %w", why, commitErr))
			}
		}
		if err != nil && s.unregistered(ask, o) {
			// Nobody can ever be asked: the node was removed, or its entry now names another
			// server, and the one the attempt used does not answer. As the rescue does for a
			// dead worker's attempt on a removed node, the task fails and is not run again
			// on its own: it may have committed.
			return taskerr.Permanent(fmt.Errorf("the COMMIT's answer was lost, and node %s is no longer registered with the conninfo the attempt "+
				"used (deckhand node remove, or node add with another), which does not answer: whether transaction %s committed cannot be "+
				"asked, so its effect is unknown, and it does not run again on its own (deckhand job retry runs it again); asking it: %v", o.Node, xid, err))
		}
		// Unreachable, or still committing (its backend has not yet noticed the lost
		// connection): ask again.
		timer := time.NewTimer(delay)
		for waiting := true; waiting; {
			select {
			case <-timer.C:
				waiting = false
			case <-s.killed:
				timer.Stop()
				return fmt.Errorf("%w (transaction %s): %w", errCommitUnknown, xid, commitErr)
			case <-stopped:
				if errors.Is(context.Cause(ctx), errLeaseLost) {
					timer.Stop()
					return commitErr // dropped: the lease is lost
				}
				stopped = nil // cancelled otherwise, and the first cause is the one that stays
			}
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// readDiscarding reads every result of mrr as MultiResultReader.ReadAll does, but keeps no
// row but those of nodeconn.AttemptXactSQL's result: a task's SQL may return as many rows as it likes
// (SELECT ... FROM generate_series(1, 1e9)), and the worker, whose memory every other running
// task shares, must not hold them. Each row is read and dropped as it comes.
func readDiscarding(mrr *pgconn.MultiResultReader) ([]*pgconn.Result, error) {
	var results []*pgconn.Result
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		r := &pgconn.Result{}
		for rr.NextRow() {
			fields := rr.FieldDescriptions()
			if len(fields) != 1 || fields[0].Name != nodeconn.XactColumn || len(r.Rows) > 1 {
				continue
			}
			if r.FieldDescriptions == nil {
				r.FieldDescriptions = slices.Clone(fields)
			}
			r.Rows = append(r.Rows, [][]byte{slices.Clone(rr.Values()[0])})
		}
		r.CommandTag, r.Err = rr.Close()
		results = append(results, r)
	}
	return results, mrr.Close()
}

// unregistered reports whether the catalog says that o's node is no longer registered with
// the conninfo o has; false when it cannot say.
func (s sqlExecutor) unregistered(ctx context.Context, o nodeconn.Owner) bool {
	if s.nodes == nil || s.nodes == (*catalog.Catalog)(nil) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.nodes.NodesByName(ctx, []string{o.Node})
	if err != nil {
		return false
	}
	n, ok := nodes[o.Node]
	return !ok || n.DSN != o.DSN
}

// attemptXact finds the transaction in the results of the task's SQL and
// nodeconn.AttemptXactSQL(conn): an empty XID when the transaction wrote nothing; ok false
// when that statement never ran as a statement of its own; an error when its value is not
// what it reads.
func attemptXact(conn *pgx.Conn, results []*pgconn.Result) (x nodeconn.Xact, ok bool, err error) {
	if len(results) == 0 {
		return nodeconn.Xact{}, false, nil
	}
	last := results[len(results)-1]
	if len(last.FieldDescriptions) != 1 || last.FieldDescriptions[0].Name != nodeconn.XactColumn || len(last.Rows) != 1 {
		return nodeconn.Xact{}, false, nil
	}
	if last.Rows[0][0] == nil {
		return nodeconn.Xact{}, true, nil // NULL: no id
	}
	if x, ok = nodeconn.ReadAttemptXact(conn, string(last.Rows[0][0])); !ok {
		// The transaction rolls back with the session: nothing was recorded for it.
		return nodeconn.Xact{}, false, fmt.Errorf("the node's answer %q is not a transaction id and timeline", last.Rows[0][0])
	}
	return x, true, nil
}

// commitUnknown reports whether a COMMIT's error leaves its outcome unknown: the connection
// failed, rather than the server refusing the commit (a deferred constraint, a serialization
// failure), which rolls the transaction back.
func commitUnknown(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// explainImplicitTransaction adds to a refusal to run inside a transaction block (25001), met
// by a task outside a transaction, why: PostgreSQL runs a query string of several statements
// as one implicit transaction, so such a statement must be its task's only one. PostgreSQL's
// words alone read as if deckhand had opened a transaction.
func explainImplicitTransaction(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25001" {
		return err
	}
	explained := *pgErr
	explained.Message += " (the task's SQL has several statements, which PostgreSQL runs as one implicit transaction " +
		"even with transaction: false; give a statement that refuses a transaction block a task of its own)"
	return &explained
}
