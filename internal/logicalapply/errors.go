package logicalapply

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// ApplyError is a change the target refused (a constraint, a missing table or column, a type
// that does not take the value): applying it again cannot succeed, so Run returns it marked
// permanent (taskerr.Permanent). Connection losses and other transient failures are returned
// as plain errors: the caller runs again with new connections and resumes exactly.
type ApplyError struct {
	Op        string        // INSERT, UPDATE, DELETE, TRUNCATE, or the step (resolve, commit)
	Relation  string        // schema.table on the source, when the error concerns one
	LSN       pglogrepl.LSN // the change's position in the source WAL
	CommitLSN pglogrepl.LSN // the commit record of the source transaction it belongs to
	Err       error
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	b.WriteString("logicalapply: ")
	b.WriteString(e.Op)
	if e.Relation != "" {
		b.WriteString(" ")
		b.WriteString(e.Relation)
	}
	fmt.Fprintf(&b, " (change %s of the transaction committed at %s): %v", e.LSN, e.CommitLSN, e.Err)
	return b.String()
}

func (e *ApplyError) Unwrap() error { return e.Err }

// targetError classifies an error from the target while applying a change: transient
// failures (connection loss, admin shutdown, deadlock, ...) come back as they are, with
// context; anything else is an ApplyError marked permanent.
func targetError(e *ApplyError) error {
	if transient(e.Err) {
		return retryable(e.Err, targetContext(e))
	}
	return taskerr.Permanent(e)
}

// retryable returns err with context, in a form taskerr.Retryable takes as retryable: an
// error the server reports that taskerr holds permanent in general (a slot still active, a
// FATAL ending the session) is flattened to its text.
func retryable(err error, context string) error {
	if taskerr.Retryable(err) {
		return fmt.Errorf("%s: %w", context, err)
	}
	return fmt.Errorf("%s: %v", context, err)
}

func targetContext(e *ApplyError) string {
	where := e.Op
	if e.Relation != "" {
		where += " " + e.Relation
	}
	if e.LSN != 0 {
		where += " at " + e.LSN.String()
	}
	return "logicalapply: target: " + where
}

// refusal is a change the target cannot take as it stands (no such table or column, no key):
// running again does not help.
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }

func refused(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// transient reports whether err is worth a new run with new connections.
func transient(err error) bool {
	var r *refusal
	if errors.As(err, &r) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" {
			return true // the server ended the session (pg_terminate_backend, shutdown)
		}
		if pgErr.Code == "55006" {
			return true // the slot is still active for a walsender that has not exited yet
		}
	}
	return taskerr.Retryable(err)
}

// sourceError classifies an error of the replication stream.
func sourceError(err error) error {
	if transient(err) {
		return retryable(err, "logicalapply: source")
	}
	return taskerr.Permanent(fmt.Errorf("logicalapply: source: %w", err))
}
