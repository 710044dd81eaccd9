package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// errTakenOver: the attempt's lease is gone and the task was handed to another attempt; its
// transaction must not commit.
var errTakenOver = errors.New("the attempt was taken over (its worker's lease expired): its transaction is rolled back")

// xactBatcher records attempts' node transaction ids in the catalog, many in one statement:
// each attempt waits for its own to be durable before committing on its node, and attempts
// that come while a statement runs go together in the next.
type xactBatcher struct {
	cat  *catalog.Catalog
	reqs chan xactRequest
}

type xactRequest struct {
	x    catalog.AttemptXact
	done chan error
}

// maxXactBatch bounds one statement: large enough for every slot of a busy worker.
const maxXactBatch = 1000

func newXactBatcher(cat *catalog.Catalog) *xactBatcher {
	return &xactBatcher{cat: cat, reqs: make(chan xactRequest)}
}

// Record makes xid durable as the node transaction of t's attempt. It fails when the catalog
// cannot be reached, or when the attempt was taken over; then the transaction must not commit.
func (b *xactBatcher) Record(ctx context.Context, t *deckhandtype.ClaimedTask, xid string) error {
	req := xactRequest{x: catalog.AttemptXact{TaskID: t.ID, Token: t.Token, XID: xid}, done: make(chan error, 1)}
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
	for {
		var batch []xactRequest
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < maxXactBatch {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		xs := make([]catalog.AttemptXact, len(batch))
		for i, r := range batch {
			xs[i] = r.x
		}
		current, err := b.cat.RecordXacts(ctx, xs)
		if catalog.IsLockTimeout(err) {
			// A task's row is held, most likely by a caller of deckhand.pause or cancel who
			// keeps its locks: each attempt is recorded alone, so that only that one waits.
			for _, r := range batch {
				go b.recordAlone(ctx, r)
			}
			continue
		}
		for _, r := range batch {
			answer(r, current, err)
		}
	}
}

// recordAlone records one attempt's transaction, waiting for as long as its task's row is
// held (the attempt's own job), or until ctx ends.
func (b *xactBatcher) recordAlone(ctx context.Context, r xactRequest) {
	for {
		current, err := b.cat.RecordXacts(ctx, []catalog.AttemptXact{r.x})
		if !catalog.IsLockTimeout(err) || ctx.Err() != nil {
			answer(r, current, err)
			return
		}
	}
}

func answer(r xactRequest, current map[int64]bool, err error) {
	switch {
	case err != nil:
		r.done <- fmt.Errorf("record the node transaction of task %d: %w", r.x.TaskID, err)
	case !current[r.x.TaskID]:
		r.done <- errTakenOver
	default:
		r.done <- nil
	}
}
