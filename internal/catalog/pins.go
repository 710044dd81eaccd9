package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// PinResource keeps a resource alive. With opID it lasts while that operation runs (and is
// refused with ErrOperationEnded if it does not): workers pin what their operations use. With
// opID 0 it lasts until UnpinResource: an admin's pin (deckhand.pin).
func (c *Catalog) PinResource(ctx context.Context, r deckhandtype.CleanupResource, opID int64, reason string) (int64, error) {
	var id int64
	if opID == 0 {
		err := c.Pool.QueryRow(ctx, `
			SELECT deckhand.pin(resource_type => @type, node => @node, location => @location, name => @name, reason => @reason)`,
			resourceArgs(r, pgx.StrictNamedArgs{"reason": reason})).Scan(&id)
		return id, callError(err)
	}
	err := c.Pool.QueryRow(ctx, `
		INSERT INTO deckhand.cleanup_pin (resource_type, node, location, name, operation_id, reason)
		SELECT @type, @node, @location, @name, @op, @reason
		WHERE EXISTS (SELECT 1 FROM deckhand.operation WHERE id = @op AND state = 'running')
		RETURNING id`, resourceArgs(r, pgx.StrictNamedArgs{"op": opID, "reason": reason})).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pin %s %s: operation %d: %w", r.Type, r.Display(), opID, ErrOperationEnded)
	}
	if err != nil {
		return 0, fmt.Errorf("pin %s %s: %w", r.Type, r.Display(), err)
	}
	return id, nil
}

// UnpinResource removes an admin's pin (deckhand.unpin); due records it held back are tried at once.
func (c *Catalog) UnpinResource(ctx context.Context, pinID int64) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.unpin($1)`, pinID)
	return callError(err)
}

// UnpinOperation removes the pins an operation holds on a resource; due records they held
// back are tried at once.
func (c *Catalog) UnpinOperation(ctx context.Context, opID int64, r deckhandtype.CleanupResource) error {
	_, err := c.Pool.Exec(ctx, `
		WITH unpinned AS (
			DELETE FROM deckhand.cleanup_pin
			WHERE operation_id = @op AND resource_type = @type AND coalesce(node, '') = coalesce(@node, '')
			  AND location = @location AND name = @name
			RETURNING node, location
		), woken AS (
			UPDATE deckhand.cleanup_record SET next_attempt_at = '-infinity'
			WHERE state = 'due' AND wait_reason = 'pinned' AND coalesce(node, '') = coalesce(@node, '')
			  AND (location = @location OR (resource_type = 'schema_cascade' AND name IN (@location, @name)))
			  AND EXISTS (SELECT 1 FROM unpinned)
			RETURNING id
		)
		SELECT pg_notify(@channel, '') WHERE EXISTS (SELECT 1 FROM woken)`,
		resourceArgs(r, pgx.StrictNamedArgs{"op": opID, "channel": ChannelCleanup}))
	if err != nil {
		return fmt.Errorf("unpin %s %s: %w", r.Type, r.Display(), err)
	}
	return nil
}

// PinnedBy describes the pin in force on a resource, or returns "" when there is none.
func (c *Catalog) PinnedBy(ctx context.Context, r deckhandtype.CleanupResource) (string, error) {
	var by *string
	err := c.Pool.QueryRow(ctx, `SELECT deckhand.pinned_by($1, $2, $3, $4)`, r.Type, nonEmpty(r.Node), r.Location, r.Name).Scan(&by)
	if err != nil {
		return "", fmt.Errorf("check pins on %s %s: %w", r.Type, r.Display(), err)
	}
	if by == nil {
		return "", nil
	}
	return *by, nil
}

// Pins lists pins, newest first.
func (c *Catalog) Pins(ctx context.Context) ([]deckhandtype.Pin, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, resource_type, node, location, name, operation_id, job_id, reason, created_by, created_at, in_force
		FROM deckhand.cleanup_pins ORDER BY id DESC LIMIT 1000`)
	pins, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Pin])
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return pins, nil
}
