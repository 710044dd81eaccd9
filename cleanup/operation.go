package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// Operation is the scope of cleanup records: what it registers is removed according to each
// record's policy when it ends. A task kind begins one per attempt (Begin) or shares one per
// job (BeginJob), registers every resource before creating it, and finishes it. An operation
// that is never finished — its worker died, its attempt failed — is decided failed by the
// cleaner once it is no longer alive.
type Operation struct {
	c     *Cleaner
	id    int64
	owner string
	ended bool
}

// Begin starts an operation scoped to the attempt t: it is alive while the attempt runs and
// its worker's lease is fresh. Removals run as t's owner.
func (c *Cleaner) Begin(ctx context.Context, t *deckhandtype.ClaimedTask, description string) (*Operation, error) {
	id, err := c.Catalog.BeginOperation(ctx, catalog.NewOperation{
		JobID: t.JobID, TaskID: t.ID, Token: t.Token, Owner: t.Owner, Description: description,
	})
	if err != nil {
		return nil, err
	}
	return &Operation{c: c, id: id, owner: t.Owner}, nil
}

// BeginJob returns the job-wide operation of jobID, creating it on first use: it is alive
// until the job ends, and succeeds if the job finishes. Use it for resources that must outlive
// the task that created them, like the parts of an export that other tasks commit.
func (c *Cleaner) BeginJob(ctx context.Context, jobID int64, owner, description string) (*Operation, error) {
	id, err := c.Catalog.BeginOperation(ctx, catalog.NewOperation{JobID: jobID, Owner: owner, Description: description})
	if err != nil {
		return nil, err
	}
	op, err := c.Catalog.OperationByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Operation{c: c, id: id, owner: op.Owner}, nil
}

// ID is the operation's id in deckhand.operations.
func (op *Operation) ID() int64 { return op.id }

// Register records, in its own committed transaction, that the operation is about to create r
// (or, for DeferredOnSuccess, will replace it). Call it BEFORE creating the resource: a crash
// right after the creation then still leaves a record behind. Name resources so that the
// name belongs to this operation (include the operation id) or check that it is free first;
// if the creation finds the name taken, call Forget.
//
// If a record of an ended operation still names r (a retry of a failed attempt recreating
// the same table), that record is removed first; if its resource is in use or its operation is
// alive, Register returns a *catalog.ResourceBusyError.
func (op *Operation) Register(ctx context.Context, r Resource, p Policy) (int64, error) {
	if err := validate(r); err != nil {
		return 0, err
	}
	if !validPolicy(p) {
		return 0, fmt.Errorf("cleanup: unknown policy %q", p)
	}
	for try := 0; ; try++ {
		id, err := op.c.Catalog.RegisterCleanup(ctx, op.id, r, p)
		var busy *catalog.ResourceBusyError
		if !errors.As(err, &busy) || busy.OperationLive || try == 2 {
			return id, err
		}
		// The leftover of an ended operation (an earlier attempt of this task, say): resolve
		// it and remove what it left now, in its order, so that the cleaner cannot remove
		// what we are about to create.
		if _, err := op.c.Catalog.DecideOperations(ctx); err != nil {
			return 0, err
		}
		if _, err := op.c.pass(ctx, busy.OperationID, 5*time.Second); err != nil {
			return 0, err
		}
	}
}

// Forget drops a record registered by this operation whose resource turned out not to be the
// operation's: its creation failed because the name was taken.
func (op *Operation) Forget(ctx context.Context, recordID int64) error {
	return op.c.Catalog.ForgetCleanup(ctx, op.id, recordID)
}

// Succeed ends the operation successfully in its final catalog transaction: its OnFailure
// records are forgotten; Always and DeferredOnSuccess records become due. It fails with
// catalog.ErrOperationEnded if the cleaner already counted the operation failed (its lease
// expired): the caller must then not act as if it succeeded.
func (op *Operation) Succeed(ctx context.Context) error {
	err := op.c.Catalog.FinishOperation(ctx, op.id, true, "")
	if err == nil {
		op.ended = true
	}
	return err
}

// Fail ends the operation as failed: its OnFailure and Always records become due,
// DeferredOnSuccess ones are forgotten.
func (op *Operation) Fail(ctx context.Context, cause error) error {
	reason := "failed"
	if cause != nil {
		reason = "failed: " + cause.Error()
	}
	err := op.c.Catalog.FinishOperation(ctx, op.id, false, reason)
	if err == nil || errors.Is(err, catalog.ErrOperationEnded) {
		op.ended = true
	}
	return err
}

// Ended reports whether Succeed or Fail has ended the operation.
func (op *Operation) Ended() bool { return op.ended }

// RemoveDue removes the operation's due records now, in dependency order, instead of leaving
// them to the cleaner on the leader; resources in use are waited for up to wait. Whatever it
// cannot remove stays due for the cleaner. Call it after Succeed or Fail.
func (op *Operation) RemoveDue(ctx context.Context, wait time.Duration) (*Report, error) {
	return op.c.pass(ctx, op.id, wait)
}

// Pin keeps r alive while this operation runs: the cleaner and deckhand's drops refuse it.
func (op *Operation) Pin(ctx context.Context, r Resource, reason string) (int64, error) {
	if err := validate(r); err != nil {
		return 0, err
	}
	return op.c.Catalog.PinResource(ctx, r, op.id, reason)
}

// Unpin removes this operation's pins on r.
func (op *Operation) Unpin(ctx context.Context, r Resource) error {
	return op.c.Catalog.UnpinOperation(ctx, op.id, r)
}

// Pin keeps r alive until Unpin, whatever operation registered it.
func (c *Cleaner) Pin(ctx context.Context, r Resource, reason string) (int64, error) {
	if err := validate(r); err != nil {
		return 0, err
	}
	return c.Catalog.PinResource(ctx, r, 0, reason)
}

// Unpin removes a pin; records it held back are tried at once.
func (c *Cleaner) Unpin(ctx context.Context, pinID int64) error {
	return c.Unpin(ctx, pinID)
}
