package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// errTakenOver: the attempt's lease is gone and the task was handed to another attempt; its
// transaction must not commit.
var errTakenOver = errors.New("the attempt was taken over (its worker's lease expired): its transaction is rolled back")

// xactBatcher records attempts' node transaction ids in the catalog, many in one statement:
// each attempt waits for its own to be durable before committing on its node, and attempts
// that come while a statement runs go together in the next.
//
// A catalog that cannot be reached (a restart, a failover) is waited for, with the backoff of
// the worker's other catalog calls: giving up would roll back work that is done and only
// needs recording, and charge the task an attempt for it, while the worker's lease still
// holds. An attempt stops waiting when its own context ends (its task is cancelled or times
// out, the worker stops); an attempt the leader took over meanwhile is refused once the
// catalog answers (errTakenOver). The statement is a guarded UPDATE, so trying it again
// after an answer was lost does no harm.
type xactBatcher struct {
	cat     *catalog.Catalog
	reqs    chan xactRequest
	timeout time.Duration  // bounds each statement, as CatalogTimeout bounds the worker's calls
	rand    func() float64 // jitter of the retries
	log     *slog.Logger

	// held are the requests of jobs whose task rows were found held (a lock timeout), by
	// job, while a goroutine of their own records them: the job's later requests join them
	// there rather than make every batch wait for the lock again.
	heldMu sync.Mutex
	held   map[int64][]xactRequest
}

type xactRequest struct {
	ctx  context.Context // the attempt's: once it ends, nobody waits for the answer
	job  int64
	x    catalog.AttemptXact
	done chan error
}

// maxXactBatch bounds one statement: large enough for every slot of a busy worker.
const maxXactBatch = 1000

func newXactBatcher(cat *catalog.Catalog, cfg Config, log *slog.Logger) *xactBatcher {
	return &xactBatcher{cat: cat, reqs: make(chan xactRequest), timeout: cfg.CatalogTimeout, rand: cfg.Rand, log: log,
		held: map[int64][]xactRequest{}}
}

// Record makes x durable as the node transaction of t's attempt, waiting for a catalog that
// cannot be reached until ctx ends. It fails when ctx ends first, or when the attempt was
// taken over; then the transaction must not commit.
func (b *xactBatcher) Record(ctx context.Context, t *deckhandtype.ClaimedTask, x nodeconn.Xact) error {
	req := xactRequest{ctx: ctx, job: t.JobID, x: catalog.AttemptXact{TaskID: t.ID, Token: t.Token, Xact: x}, done: make(chan error, 1)}
	select {
	case b.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run records until ctx ends; the worker stops it only once its tasks have ended.
func (b *xactBatcher) run(ctx context.Context) {
	var batch []xactRequest
	for failures := 0; ; {
		if len(batch) == 0 {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			case <-ctx.Done():
				return
			}
		}
		batch = b.gather(ctx, batch)
		err := b.recordOnce(ctx, batch)
		if err == nil {
			batch, failures = nil, 0
			continue
		}
		failures++
		delay := catalogRetry.Delay(failures, b.rand())
		b.log.Warn("could not record node transactions; their tasks wait to commit, retrying",
			"tasks", len(batch), "err", err, "tries", failures, "in", delay)
		// Requests keep coming while waiting: they go in the next try.
		wait := time.NewTimer(delay)
	sleep:
		for {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			case <-wait.C:
				break sleep
			case <-ctx.Done():
				wait.Stop()
				return
			}
		}
	}
}

// gather adds the requests already waiting to batch, up to maxXactBatch, and leaves out those
// whose attempt stopped waiting, and those of held jobs, which join their job's.
func (b *xactBatcher) gather(ctx context.Context, batch []xactRequest) []xactRequest {
	for len(batch) < maxXactBatch {
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
			continue
		default:
		}
		break
	}
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() == nil && !b.joinHeld(r) {
			live = append(live, r)
		}
	}
	return live
}

// recordOnce makes one statement of batch and answers its requests, unless the catalog could
// not be reached: then it answers none and returns the error.
func (b *xactBatcher) recordOnce(ctx context.Context, batch []xactRequest) error {
	if len(batch) == 0 {
		return nil
	}
	xs := make([]catalog.AttemptXact, len(batch))
	for i, r := range batch {
		xs[i] = r.x
	}
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	current, err := b.cat.RecordXacts(cctx, xs)
	cancel()
	if catalog.IsLockTimeout(err) {
		// A task's row is held, most likely by a caller of deckhand.pause or cancel who keeps
		// its job's locks: each job's attempts are recorded apart, so that only the held
		// job's wait, and the batches go on meanwhile.
		for _, r := range batch {
			b.hold(ctx, r)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("record the node transactions of %d tasks: %w", len(batch), err)
	}
	for _, r := range batch {
		answer(r, current)
	}
	return nil
}

// heldXactKey groups held requests: by job, or by task when the job is not known.
func heldXactKey(r xactRequest) int64 {
	if r.job != 0 {
		return r.job
	}
	return -r.x.TaskID
}

// joinHeld queues r with its job's held requests, if it has any, and reports whether it did.
func (b *xactBatcher) joinHeld(r xactRequest) bool {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	q, ok := b.held[heldXactKey(r)]
	if ok {
		b.held[heldXactKey(r)] = append(q, r)
	}
	return ok
}

// hold queues r with its job's held requests, and starts recording them if nothing does yet.
func (b *xactBatcher) hold(ctx context.Context, r xactRequest) {
	key := heldXactKey(r)
	b.heldMu.Lock()
	q, active := b.held[key]
	b.held[key] = append(q, r)
	b.heldMu.Unlock()
	if !active {
		go b.recordHeld(ctx, key)
	}
}

// recordHeld records the transactions of one job's held requests, with those that join them
// meanwhile, for as long as its rows are held or the catalog cannot be reached, until their
// attempts stop waiting or ctx ends: one goroutine, one statement and one catalog connection
// per held job.
func (b *xactBatcher) recordHeld(ctx context.Context, key int64) {
	var pending []xactRequest
	for failures := 0; ; {
		b.heldMu.Lock()
		pending = append(pending, b.held[key]...)
		live := pending[:0]
		for _, r := range pending {
			if r.ctx.Err() == nil {
				live = append(live, r)
			}
		}
		pending = live
		if len(pending) == 0 || ctx.Err() != nil {
			delete(b.held, key)
			b.heldMu.Unlock()
			return
		}
		b.held[key] = []xactRequest{}
		b.heldMu.Unlock()
		xs := make([]catalog.AttemptXact, len(pending))
		for i, r := range pending {
			xs[i] = r.x
		}
		cctx, cancel := context.WithTimeout(ctx, b.timeout)
		current, err := b.cat.RecordXacts(cctx, xs)
		cancel()
		switch {
		case err == nil:
			for _, r := range pending {
				answer(r, current)
			}
			pending, failures = nil, 0
			continue
		case catalog.IsLockTimeout(err):
			continue // each try already waited for the lock
		}
		failures++
		select {
		case <-time.After(catalogRetry.Delay(failures, b.rand())):
		case <-ctx.Done():
		}
	}
}

// answer tells the attempt whether its transaction id was recorded (it may commit) or the
// attempt was taken over.
func answer(r xactRequest, current map[int64]bool) {
	if current[r.x.TaskID] {
		r.done <- nil
	} else {
		r.done <- errTakenOver
	}
}
