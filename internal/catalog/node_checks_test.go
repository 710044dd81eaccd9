package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A probing round's checks are recorded in one statement, each node's as a check of its own
// would be (a failed probe's message redacted); a node whose row stays locked is waited for
// briefly, then left to the next round and returned.
func TestRecordNodeChecksPassesLockedNodes(t *testing.T) {
	cat := migratedCatalog(t)
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks, replay_lsn) VALUES
		('a', 'host=/nonexistent', 'a', 'primary', 4, NULL),
		('b', 'host=/nonexistent', 'b', 'primary', 4, NULL),
		('c', 'host=/nonexistent', 'c', 'standby', 4, '0/5')`); err != nil {
		t.Fatal(err)
	}
	claimer, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claimer.Rollback(ctx) //nolint:errcheck
	if _, err := claimer.Exec(ctx, `SELECT FROM deckhand.node WHERE name = 'b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	checks := []catalog.NodeCheck{
		{Name: "a", Role: "primary", LSN: "0/10"},
		{Name: "b", Role: "standby", LSN: "0/20"},
		{Name: "c", Err: errors.New("connect: password=hunter2 refused")},
	}
	round, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	began := time.Now()
	skipped, err := cat.RecordNodeChecks(round, checks)
	if err != nil || len(skipped) != 1 || skipped[0] != "b" {
		t.Fatalf("RecordNodeChecks skipped %v, %v; want b alone (locked)", skipped, err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("RecordNodeChecks took %s: it waited for the locked row", took)
	}
	type row struct {
		role, lsn, lastError string
		checked              bool
	}
	read := func(name string) row {
		t.Helper()
		var r row
		if err := cat.Pool.QueryRow(ctx, `SELECT role, coalesce(replay_lsn::text, ''), coalesce(last_error, ''), checked_at IS NOT NULL
			FROM deckhand.node WHERE name = $1`, name).Scan(&r.role, &r.lsn, &r.lastError, &r.checked); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got, want := read("a"), (row{"primary", "0/10", "", true}); got != want {
		t.Errorf("a: %+v, want %+v", got, want)
	}
	if got, want := read("b"), (row{"primary", "", "", false}); got != want {
		t.Errorf("b, locked: %+v, want it untouched %+v", got, want)
	}
	// A failed probe keeps what the node was last seen as, and says why.
	if got, want := read("c"), (row{"standby", "0/5", "connect: password=REDACTED refused", true}); got != want {
		t.Errorf("c: %+v, want %+v", got, want)
	}
	if err := claimer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if skipped, err := cat.RecordNodeChecks(ctx, checks[1:2]); err != nil || len(skipped) != 0 {
		t.Fatalf("RecordNodeChecks of b once free skipped %v, %v; want none", skipped, err)
	}
	if got, want := read("b"), (row{"standby", "0/20", "", true}); got != want {
		t.Errorf("b: %+v, want %+v", got, want)
	}
}
