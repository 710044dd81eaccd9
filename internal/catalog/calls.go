package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors the catalog's functions raise on purpose, as users see them.
var (
	// ErrInvalid marks input a catalog function refused (SQLSTATE 22023).
	ErrInvalid = errors.New("invalid input")
	// ErrForbidden marks something the caller's role may not do (SQLSTATE 42501).
	ErrForbidden = errors.New("permission denied")
)

// ErrDuplicateKey marks a submission (or retry) refused because an unfinished job of the same
// submitter holds its key; the error is a *DuplicateKeyError.
var ErrDuplicateKey = errors.New("job key is held by an unfinished job")

// DuplicateKeyError is the refusal of a job whose key an unfinished job holds.
type DuplicateKeyError struct {
	JobID int64 // the job that holds the key; 0 when the caller may not see it
	msg   string
}

func (e *DuplicateKeyError) Error() string        { return e.msg }
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// refusal is a catalog function's refusal: its message is meant for the user as it stands,
// one line, and Is reports what kind of refusal it is.
type refusal struct {
	msg  string
	kind error
}

// Error is the message without the "deckhand: " some functions start it with: the CLI adds its own.
func (r *refusal) Error() string        { return strings.TrimPrefix(r.msg, "deckhand: ") }
func (r *refusal) Is(target error) bool { return target == r.kind }

// callError turns the error of a call to one of the catalog's SQL functions into the error the
// caller should see: the function's own message for the refusals it raises on purpose, marked
// with ErrInvalid, ErrForbidden, ErrNotFound or ErrJobTerminal; other errors unchanged.
func callError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "22023": // invalid_parameter_value
		return &refusal{pgErr.Message, ErrInvalid}
	case "42501": // insufficient_privilege
		return &refusal{ExplainRefusal(pgErr.Message), ErrForbidden}
	case "P0002": // no_data_found
		return &refusal{pgErr.Message, ErrNotFound}
	case "55000": // object_not_in_prerequisite_state
		return &refusal{pgErr.Message, ErrJobTerminal}
	case "23505": // unique_violation
		if pgErr.ConstraintName == "job_key_idx" {
			holder, _ := strconv.ParseInt(pgErr.Detail, 10, 64) // empty when the caller may not see the holder
			return &DuplicateKeyError{JobID: holder, msg: pgErr.Message}
		}
	}
	return err
}

// ExplainRefusal completes PostgreSQL's own "permission denied for ..." on the catalog, which
// means the role lacks the catalog role that grants it; other messages are returned as they are.
func ExplainRefusal(msg string) string {
	if strings.HasPrefix(msg, "permission denied for") {
		return msg + noAccessHint
	}
	return msg
}

const noAccessHint = ": the catalog role needs deckhand_submitter (to submit and watch jobs) or deckhand_admin, " +
	"and deckhand_worker to run deckhand serve or cleanup run; see docs/security.md"

// ExplainReadOnly completes PostgreSQL's refusal of a write by a read-only server ("cannot
// execute INSERT in a read-only transaction"), which for deckhand means the catalog conninfo
// reached a standby: named alone, or first of several hosts without target_session_attrs.
// Commands that only read work there; anything that writes must reach the primary.
func ExplainReadOnly(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25006" && strings.Contains(pgErr.Message, "read-only transaction") {
		return fmt.Errorf("%w: the catalog server is read-only (a standby?); point --catalog at the primary, "+
			"or list every server with target_session_attrs=read-write (see docs/operations.md)", err)
	}
	return err
}
