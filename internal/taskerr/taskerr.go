// Package taskerr classifies what a task's attempt returned: permanent (fail now), superseded
// (cancel: newer work replaced it), retryable (run again after a backoff), or in use (wait for
// the resource). The engine decides a task's fate from it; executors mark their errors with it.
package taskerr

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5/pgconn"
)

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that Retryable never retries it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// supersededError marks an attempt whose work is no longer wanted: the task ends cancelled,
// neither retried nor failing its job.
type supersededError struct{ err error }

func (e supersededError) Error() string { return e.err.Error() }
func (e supersededError) Unwrap() error { return e.err }

// Superseded wraps err so that the task ends cancelled: something newer replaced its work
// (for example a part of an export whose coordinator took a new consistency point).
func Superseded(err error) error { return supersededError{err} }

// IsSuperseded reports whether err was wrapped by Superseded.
func IsSuperseded(err error) bool {
	var s supersededError
	return errors.As(err, &s)
}

// Retryable reports whether an attempt that failed with err may succeed if run again:
// connection loss, serialization failures and deadlocks, lock and statement timeouts,
// recovery conflicts, administrator shutdown and resource exhaustion. Syntax, permission,
// undefined object, data and authentication errors are permanent.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var perm permanentError
	if errors.As(err, &perm) || IsSuperseded(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		switch {
		case strings.HasPrefix(code, "08"), // connection exception
			strings.HasPrefix(code, "53"), // insufficient resources (too many connections, out of memory, disk full)
			strings.HasPrefix(code, "58"): // system error (I/O)
			return true
		}
		switch code {
		case "40001", // serialization failure; also recovery conflicts on standbys
			"40P01", // deadlock detected
			"55P03", // lock not available (lock_timeout)
			"57014", // query canceled (statement_timeout)
			"57P01", // admin shutdown
			"57P02", // crash shutdown
			"57P03": // cannot connect now (starting up, recovering)
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		// A refused or dropped connection is transient; a refused login is not.
		return !strings.Contains(connectErr.Error(), "authentication") && !strings.Contains(connectErr.Error(), "does not exist")
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	// Unknown failures (a closed connection, a driver error) are treated as transient:
	// max_attempts bounds the cost of being wrong.
	return true
}

// Describe turns an error into the record kept for the attempt, keeping PostgreSQL's fields.
func Describe(err error) *deckhandtype.TaskError {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &deckhandtype.TaskError{SQLState: pgErr.Code, Message: pgErr.Message, Detail: pgErr.Detail, Hint: pgErr.Hint}
	}
	return &deckhandtype.TaskError{Message: ConnectMessage(err)}
}

// ConnectMessage is err's message with the failed connection in it, if any, said once and on
// one line. pgx reports a connection it could not make attempt by attempt, a line each: with
// sslmode prefer (libpq's default) a server without TLS first refuses TLS, which only means
// that the plain attempt follows, and both attempts at a server that does not answer fail
// alike. Left as they are, the reason a user needs ("password authentication failed") comes
// after a "tls error" that is none, or twice.
func ConnectMessage(err error) string {
	msg := err.Error()
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) {
		return msg
	}
	full := connectErr.Error()
	lines := strings.Split(full, "\n")
	var attempts []string
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		// A line that ends an earlier one repeats it: the same failure of another attempt, or
		// a host name's lookup after "hostname resolving error: " and that same lookup.
		if l != "" && !slices.ContainsFunc(attempts, func(a string) bool { return strings.HasSuffix(a, l) }) {
			attempts = append(attempts, l)
		}
	}
	// A refusal of TLS is dropped when another attempt at the same server follows (sslmode
	// prefer's plain one); without one (sslmode require, several hosts) it is that server's
	// only failure.
	server := func(a string) string {
		if i := strings.Index(a, "): "); i >= 0 {
			return a[:i+len("): ")]
		}
		return a
	}
	all := slices.Clone(attempts)
	attempts = slices.DeleteFunc(attempts, func(a string) bool {
		return strings.HasSuffix(a, "server refused TLS connection") &&
			slices.ContainsFunc(all, func(b string) bool { return b != a && strings.HasPrefix(b, server(a)) })
	})
	if len(attempts) == 0 {
		return msg
	}
	return strings.Replace(msg, full, lines[0]+" "+strings.Join(attempts, "; "), 1)
}

// InUse reports whether a drop failed only because something else holds the object: its
// lock_timeout expired (55P03), the object is in use (55006: an active replication slot), or
// it lost a deadlock (40P01). Such drops are retried once the object is free.
func InUse(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", "55006", "40P01":
		return true
	}
	return false
}
