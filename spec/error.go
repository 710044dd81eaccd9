package spec

import (
	"fmt"
	"strings"
)

// Error is a problem with a job spec, found by Parse or Validate, or with other input a user
// gave (a node, an export request). Its message is one line, fit to show a user as is; callers
// can use errors.As to tell bad input from other failures.
type Error struct {
	Msg string
	Err error // underlying cause, if any
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Invalidf returns an *Error whose message is formatted as by fmt.Sprintf.
func Invalidf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// OneLine folds s onto one line: each run of white space, line breaks included, becomes one
// space. Errors reach users as one line (a terminal, a log line, a JSON field), whether they
// are an Error's or come from further down.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
