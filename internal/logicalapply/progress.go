package logicalapply

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The progress table holds one row: the end LSN of the last source transaction applied. It is
// written in the same target transaction as the changes, so the target alone says what it
// has applied.

func checkProgressTable(table pgx.Identifier) error {
	if len(table) != 2 || table[0] == "" || table[1] == "" {
		return fmt.Errorf("logicalapply: progress table %q: give it as schema and table", table.Sanitize())
	}
	return nil
}

// EnsureProgressTable creates the progress table (and its schema) on the target unless they
// exist, with its one row at position 0/0. The owner needs CREATE on the database (or on the
// schema, if it exists).
func EnsureProgressTable(ctx context.Context, target *pgx.Conn, table pgx.Identifier) error {
	if err := checkProgressTable(table); err != nil {
		return err
	}
	q := table.Sanitize()
	_, err := target.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{table[0]}.Sanitize()+`;
		CREATE TABLE IF NOT EXISTS `+q+` (
			singleton pg_catalog.bool PRIMARY KEY DEFAULT true CHECK (singleton),
			lsn pg_catalog.pg_lsn NOT NULL,
			applied_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now()
		);
		INSERT INTO `+q+` (singleton, lsn) VALUES (true, '0/0') ON CONFLICT (singleton) DO NOTHING`,
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return fmt.Errorf("logicalapply: create progress table %s: %w", q, err)
	}
	return nil
}

// AppliedLSN reads the position the target has applied from its progress table: 0 if it has
// applied nothing yet.
func AppliedLSN(ctx context.Context, target *pgx.Conn, table pgx.Identifier) (pglogrepl.LSN, error) {
	if err := checkProgressTable(table); err != nil {
		return 0, err
	}
	var s string
	err := target.QueryRow(ctx, `SELECT lsn::pg_catalog.text FROM `+table.Sanitize()+` WHERE singleton`).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("logicalapply: read progress table %s: %w", table.Sanitize(), err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("logicalapply: progress table %s: %w", table.Sanitize(), err)
	}
	return lsn, nil
}

// progressStatements are the statements of a target transaction around its changes.
type progressStatements struct {
	begin  string // BEGIN
	limit  string // lock_timeout for the transaction: $1
	defer_ string // SET CONSTRAINTS ALL DEFERRED
	lock   string // the progress row, locked: what the target has applied
	update string // the progress row set to $1 where it holds $2
	commit string // COMMIT
}

func newProgressStatements(table pgx.Identifier) progressStatements {
	q := table.Sanitize()
	return progressStatements{
		begin:  "BEGIN",
		limit:  `SELECT pg_catalog.set_config('lock_timeout', $1::pg_catalog.text, true)`,
		defer_: "SET CONSTRAINTS ALL DEFERRED",
		lock:   `SELECT lsn::pg_catalog.text FROM ` + q + ` WHERE singleton FOR UPDATE`,
		update: `UPDATE ` + q + ` SET lsn = $1::pg_catalog.text::pg_catalog.pg_lsn, applied_at = pg_catalog.now()
			WHERE singleton AND lsn OPERATOR(pg_catalog.=) $2::pg_catalog.text::pg_catalog.pg_lsn`,
		commit: "COMMIT",
	}
}
