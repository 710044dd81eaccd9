package catalog

import (
	"errors"
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

const noAccessHint = ": the catalog role needs deckhand_submitter (to submit and watch jobs) or deckhand_admin; see docs/security.md"
