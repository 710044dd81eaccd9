// Package catalogtest writes catalog rows directly, in any state, for tests: workers, nodes,
// jobs with their tasks, attempts, operations, cleanup records and exports. It bypasses
// deckhand's functions and statements on purpose, the way a test factory does, so that a
// statement under test can be run from every state, including those only a crash or a race
// leaves behind. Its DB must be connected as a role that writes every table: the superuser.
//
// Each factory takes options whose zero values are sensible and returns what tests need to
// address the rows (ids, attempt tokens). Snapshot reads the state of every row of the state
// machines, Reset empties the catalog between cases.
package catalogtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// DB is what the factories write through: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var seq atomic.Int64

// unique returns prefix followed by a number no other call of this process returned.
func unique(prefix string) string { return fmt.Sprintf("%s%d", prefix, seq.Add(1)) }

func exec(ctx context.Context, tb testing.TB, db DB, sql string, args ...any) {
	tb.Helper()
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("catalogtest: %v\n%s", err, sql)
	}
}

// Reset empties every table deckhand writes (not its schema version nor its task kinds), so
// that one catalog serves many cases. It deletes rather than truncates: on tables of a few
// rows, DELETE takes a millisecond where TRUNCATE takes tens.
func Reset(ctx context.Context, tb testing.TB, db DB) {
	tb.Helper()
	var deletes string
	err := db.QueryRow(ctx, `
		SELECT string_agg(format('DELETE FROM deckhand.%I', c.relname), '; ')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'deckhand' AND c.relkind IN ('r', 'p') AND c.relname NOT IN ('schema_migration', 'task_kind')`).Scan(&deletes)
	if err != nil {
		tb.Fatalf("catalogtest: list tables: %v", err)
	}
	exec(ctx, tb, db, deletes)
}

// Versioned is a row's state and its version, which changes whenever the row is written
// (its xmin): a statement that rewrites a row in the state it had shows as having touched it.
type Versioned[S ~string] struct {
	State   S
	Version uint32
}

// States is the state of every row of each state machine, by id. Cleanup records are in
// their stored state (a waiting record is due).
type States struct {
	Tasks          map[int64]Versioned[deckhandtype.TaskState]
	Jobs           map[int64]Versioned[deckhandtype.JobState]
	Operations     map[int64]Versioned[deckhandtype.OperationState]
	CleanupRecords map[int64]Versioned[deckhandtype.CleanupState]
	Exports        map[int64]Versioned[deckhandtype.ExportState]
}

// Snapshot reads States.
func Snapshot(ctx context.Context, tb testing.TB, db DB) States {
	tb.Helper()
	return States{
		Tasks:          read[deckhandtype.TaskState](ctx, tb, db, "task"),
		Jobs:           read[deckhandtype.JobState](ctx, tb, db, "job"),
		Operations:     read[deckhandtype.OperationState](ctx, tb, db, "operation"),
		CleanupRecords: read[deckhandtype.CleanupState](ctx, tb, db, "cleanup_record"),
		Exports:        read[deckhandtype.ExportState](ctx, tb, db, "export"),
	}
}

func read[S ~string](ctx context.Context, tb testing.TB, db DB, table string) map[int64]Versioned[S] {
	tb.Helper()
	rows, _ := db.Query(ctx, `SELECT id, state, xmin::text::bigint FROM deckhand.`+table)
	out := map[int64]Versioned[S]{}
	var id, version int64
	var state S
	_, err := pgx.ForEachRow(rows, []any{&id, &state, &version}, func() error {
		out[id] = Versioned[S]{State: state, Version: uint32(version)}
		return nil
	})
	if err != nil {
		tb.Fatalf("catalogtest: read %s states: %v", table, err)
	}
	return out
}
