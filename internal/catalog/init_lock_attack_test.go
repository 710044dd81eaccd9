package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A submitter reads a view (deckhand.exports) in a transaction it keeps open, holding its
// tables' ACCESS SHARE lock, which any catalog role may take. An upgrade whose migration
// alters such a table (0026 adds a column to deckhand.export) waited for that lock without
// end, saying nothing, with the lock on the version table held and every other session's
// statements on the table queued behind its own wait: the workers' included. Init waits a
// bounded time, in short waits that let others through between them, then fails naming the
// sessions that hold the catalog's tables; once they end, it upgrades.
func TestAttackHeldTableLockStallsInit(t *testing.T) {
	admin, cl, db := emptyCatalog(t)
	if _, err := admin.MigrateTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	reader := "reader_" + roleSuffix(db)
	hostile := openAs(t, cl, db, reader, "deckhand_submitter")
	tx, err := hostile.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM deckhand.exports`); err != nil {
		t.Fatal(err)
	}

	admin.InitLockWait = 3 * time.Second
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	began := time.Now()
	_, err = admin.Migrate(wait)
	took := time.Since(began)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || took > 15*time.Second ||
		!strings.Contains(err.Error(), reader) || !strings.Contains(err.Error(), "0026") {
		t.Fatalf("upgrade while %s keeps deckhand.exports read in an open transaction: after %s, err = %v; "+
			"want a refusal within seconds naming the migration and %s", reader, took.Round(time.Millisecond), err, reader)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Migrate(ctx); err != nil {
		t.Fatalf("upgrade once the reader's transaction ended: %v", err)
	}
	if err := admin.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
}
