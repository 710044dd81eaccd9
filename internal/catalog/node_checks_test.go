package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A probing round's checks are recorded in one statement, each node's as a check of its own
// would be (a failed probe's message redacted); a node a claim holds locked is passed, not
// waited for, and returned for the caller to record on its own.
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
	passed, err := cat.RecordNodeChecks(round, checks)
	if err != nil || len(passed) != 1 || passed[0].Name != "b" {
		t.Fatalf("RecordNodeChecks passed %+v, %v; want b alone (locked)", passed, err)
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
	if passed, err := cat.RecordNodeChecks(ctx, checks[1:2]); err != nil || len(passed) != 0 {
		t.Fatalf("RecordNodeChecks of b once free passed %+v, %v; want none", passed, err)
	}
	if got, want := read("b"), (row{"standby", "0/20", "", true}); got != want {
		t.Errorf("b: %+v, want %+v", got, want)
	}
}
