package nodeconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// A transactional task's SQL runs in the round trip of the owner's check and the session's
// set-up, where the session allows it: one query string of the simple protocol (which a task's
// SQL of several statements needs) that starts with the check, then BEGIN, the settings, the
// task's SQL and the read of its transaction's id. The check fails with an error, not with a
// false, when the session is not the owner's or the submitter is not a member of it; PostgreSQL
// runs no statement of a query string after one that failed, so the task's SQL never runs in
// a session that did not pass the check. Every value the string carries that deckhand did not
// make itself (the role names, the job's settings and search_path) is a quoted literal
// (QuoteLiteral), and no secret: random()'s seed comes from the server (seedSQL).
//
// A session that has not yet read its server's history (its first attempt) is set up in a
// round trip of its own first, as TaskSession sets one up; so is a task whose values a
// literal cannot carry, or whose SQL is not UTF-8.

// ReadResults reads the results of a query string of the simple protocol.
type ReadResults func(*pgconn.MultiResultReader) ([]*pgconn.Result, error)

// oneTripStatements is how many statements come before the task's SQL in the string: the
// check, BEGIN and the settings.
const oneTripStatements = 3

// TaskTransaction takes a session on the task's node as o.Role, checks that o.Submitter may
// act as that role, opens the task's transaction with the job's settings and search_path, and
// runs the task's SQL followed by AttemptXactSQL's statement, whose results read reads. It
// returns the session, inside the transaction unless something failed, and what hands it back.
// An error of the check or the set-up comes with no session: nothing of the task's SQL ran.
func (p *Pools) TaskTransaction(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask, read ReadResults) (
	conn *pgx.Conn, release func(), results []*pgconn.Result, err error) {
	names, values, err := settings(t, true)
	if err != nil {
		return nil, nil, nil, err
	}
	pooled, err := p.take(ctx, o)
	if err != nil {
		return nil, nil, nil, err
	}
	conn = pooled.Conn()
	release = func() { Release(ctx, pooled) }
	prefix, ok := oneTripPrefix(o, names, values)
	// The literals are written for UTF-8 (Pools sets it as the session starts; RESET ALL goes
	// back to that). SQL that is not UTF-8 fails as the string is converted, before anything
	// in it runs: in a string of its own, that failure is plainly the task's.
	ok = ok && conn.PgConn().ParameterStatus("client_encoding") == "UTF8" && utf8.ValidString(t.SQL)
	if _, historyRead := conn.PgConn().CustomData()[serverHistoryKey]; !ok || !historyRead {
		setUp := sessionSetup{searchPath: true, begin: true}
		if err := checkOwnerConn(ctx, pooled, o, setUp.queue(names, values)); err != nil {
			return nil, nil, nil, err
		}
		results, err = read(conn.PgConn().Exec(ctx, t.SQL+"\n;\n"+AttemptXactSQL(conn)))
		return conn, release, results, err
	}
	results, err = read(conn.PgConn().Exec(ctx, prefix+t.SQL+"\n;\n"+AttemptXactSQL(conn)))
	if err != nil && !inTaskSQL(err, prefix) {
		if failed := succeeded(results); failed < oneTripStatements {
			err = setUpError(ctx, conn, o, failed, err)
			discard(ctx, pooled)
			return nil, nil, nil, err
		}
	}
	return conn, release, results, err
}

// oneTripPrefix is the query string's start, up to the task's SQL; ok false when a value
// cannot be written as a literal.
func oneTripPrefix(o Owner, names, values []string) (prefix string, ok bool) {
	role, okRole := QuoteLiteral(o.Role)
	submitter, okSubmitter := QuoteLiteral(o.Submitter)
	if !okRole || !okSubmitter {
		return "", false
	}
	var q strings.Builder
	// A CASE runs only the branch it takes, and the failing cast cannot be computed while the
	// statement is planned: its value depends on the session.
	fmt.Fprintf(&q, `SELECT CASE WHEN pg_catalog.texteq(pg_catalog.text(SESSION_USER), %s::pg_catalog.text)
		AND pg_catalog.pg_has_role(%s::pg_catalog.name, SESSION_USER, 'MEMBER'::pg_catalog.text) THEN 0
		ELSE CAST(pg_catalog.concat('deckhand: owner check failed in session of '::pg_catalog.text, SESSION_USER) AS pg_catalog.int4) END,
		%s;
BEGIN;
SELECT `, role, submitter, seedSQL)
	for i := range names {
		name, okName := QuoteLiteral(names[i])
		value, okValue := QuoteLiteral(values[i])
		if !okName || !okValue {
			return "", false
		}
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_catalog.set_config(%s::pg_catalog.text, %s::pg_catalog.text, true)", name, value)
	}
	q.WriteString(";\n")
	return q.String(), true
}

// QuoteLiteral writes s as an escape string constant (E'...'), which reads the same whatever
// standard_conforming_strings says, for a session whose client encoding is UTF-8 (where no
// byte of a multibyte character is a quote or a backslash: the sessions of this package). A
// quote is doubled rather than escaped with a backslash, which backslash_quote may refuse.
// ok is false for what no literal can carry: a NUL, text that is not UTF-8.
func QuoteLiteral(s string) (string, bool) {
	if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return "", false
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return `E'` + s + `'`, true
}

// inTaskSQL reports whether err is one PostgreSQL found past prefix, in the task's SQL, as the
// whole string was parsed (a syntax error): then nothing in the string ran, and the error is
// the task's own. PostgreSQL places such errors by character, from 1.
func inTaskSQL(err error, prefix string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && int(pgErr.Position) > utf8.RuneCountInString(prefix)
}

// succeeded counts the results that came before the first that failed.
func succeeded(results []*pgconn.Result) int {
	for i, r := range results {
		if r.Err != nil {
			return i
		}
	}
	return len(results)
}

// setUpError says why statement failed (of the string's first oneTripStatements) failed with
// err. The check's own refusal names no reason; it is asked again in the session (still
// outside a transaction then), for the same words as acquire's.
func setUpError(ctx context.Context, conn *pgx.Conn, o Owner, failed int, err error) error {
	var pgErr *pgconn.PgError
	if failed != 0 || !errors.As(err, &pgErr) || pgErr.Code != "22P02" {
		return ownerError(o, err)
	}
	if verr := VerifyOwner(ctx, conn, o); verr != nil {
		return verr
	}
	// It passes now: the membership was granted meanwhile.
	return taskerr.Permanent(fmt.Errorf("submitter %q was not a member of role %q on node %s when the task was to start: %w",
		o.Submitter, o.Role, o.Node, ErrRefused))
}
