package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
}

type xactRequest struct {
	ctx  context.Context // the attempt's: once it ends, nobody waits for the answer
	x    catalog.AttemptXact
	done chan error
}

// maxXactBatch bounds one statement: large enough for every slot of a busy worker.
const maxXactBatch = 1000

func newXactBatcher(cat *catalog.Catalog, cfg Config, log *slog.Logger) *xactBatcher {
	return &xactBatcher{cat: cat, reqs: make(chan xactRequest), timeout: cfg.CatalogTimeout, rand: cfg.Rand, log: log}
}

// Record makes x durable as the node transaction of t's attempt, waiting for a catalog that
// cannot be reached until ctx ends. It fails when ctx ends first, or when the attempt was
// taken over; then the transaction must not commit.
func (b *xactBatcher) Record(ctx context.Context, t *deckhandtype.ClaimedTask, x nodeconn.Xact) error {
	req := xactRequest{ctx: ctx, x: catalog.AttemptXact{TaskID: t.ID, Token: t.Token, Xact: x}, done: make(chan error, 1)}
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
		batch = b.gather(batch)
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
// whose attempt stopped waiting.
func (b *xactBatcher) gather(batch []xactRequest) []xactRequest {
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
		if r.ctx.Err() == nil {
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
		// its locks: each attempt is recorded alone, so that only the held one waits, and
		// the batches go on meanwhile.
		for _, r := range batch {
			go b.recordAlone(ctx, r)
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

// recordAlone records one attempt's transaction, for as long as its task's row is held (by
// the attempt's own job's caller) or the catalog cannot be reached, until the attempt stops
// waiting or ctx ends.
func (b *xactBatcher) recordAlone(ctx context.Context, r xactRequest) {
	for failures := 0; ctx.Err() == nil && r.ctx.Err() == nil; {
		cctx, cancel := context.WithTimeout(ctx, b.timeout)
		current, err := b.cat.RecordXacts(cctx, []catalog.AttemptXact{r.x})
		cancel()
		switch {
		case err == nil:
			answer(r, current)
			return
		case catalog.IsLockTimeout(err):
			continue // each try already waited for the lock
		}
		failures++
		select {
		case <-time.After(catalogRetry.Delay(failures, b.rand())):
		case <-r.ctx.Done():
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
