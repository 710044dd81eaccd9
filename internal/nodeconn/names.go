package nodeconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// ParseQualifiedName splits "schema.name" or "name" the way PostgreSQL reads it: unquoted
// parts are folded to lower case, ASCII letters only, double-quoted parts are taken as written
// ("" is a quote), and either is cut to 63 bytes. The result is one or two identifiers.
func ParseQualifiedName(s string) (pgx.Identifier, error) {
	var parts pgx.Identifier
	var cur strings.Builder
	quoted, wasQuoted := false, false
	flush := func() error {
		if cur.Len() == 0 {
			return fmt.Errorf("invalid name %q: empty part", s)
		}
		part := cur.String()
		if !wasQuoted {
			part = foldIdentifier(part)
		}
		parts = append(parts, truncateIdentifier(part))
		cur.Reset()
		wasQuoted = false
		return nil
	}
	rs := []rune(strings.TrimSpace(s))
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quoted && r == '"' && i+1 < len(rs) && rs[i+1] == '"':
			cur.WriteRune('"')
			i++
		case r == '"':
			if !quoted && cur.Len() > 0 {
				return nil, fmt.Errorf("invalid name %q: quote inside an identifier", s)
			}
			quoted = !quoted
			wasQuoted = true
		case !quoted && r == '.':
			if err := flush(); err != nil {
				return nil, err
			}
		case !quoted && (r == ' ' || r == '\t' || r == '\n' || r == ';' || r == ',' || r == '(' || r == ')'):
			return nil, fmt.Errorf("invalid name %q: unexpected %q", s, r)
		case r == 0:
			return nil, fmt.Errorf("invalid name %q: NUL byte", s)
		default:
			cur.WriteRune(r)
		}
	}
	if quoted {
		return nil, fmt.Errorf("invalid name %q: unterminated quote", s)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(parts) > 2 {
		return nil, fmt.Errorf("invalid name %q: want table or schema.table", s)
	}
	return parts, nil
}

// foldIdentifier folds an unquoted identifier as PostgreSQL does in a UTF-8 database: A-Z to
// a-z and nothing else. (strings.ToLower would fold É to é and the Kelvin sign to k, naming
// another relation than the one PostgreSQL reads.)
func foldIdentifier(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN - 1: longer identifiers are cut.
const maxIdentifierBytes = 63

// truncateIdentifier cuts s to 63 bytes at a character boundary, as PostgreSQL does.
func truncateIdentifier(s string) string {
	if len(s) <= maxIdentifierBytes {
		return s
	}
	n := maxIdentifierBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ResolveNames resolves relation names the way the job's SQL would: with its search_path, or
// PostgreSQL's default when it captured none. It returns each relation's oid, 0 for one that
// does not exist. The job's search_path is in force only inside a transaction of its own, for
// one statement that calls nothing but pg_catalog.to_regclass and uses no operator, so that no
// function or operator the owner created can take part in it.
func ResolveNames(ctx context.Context, conn *pgx.Conn, searchPath string, names []pgx.Identifier) ([]uint32, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if strings.TrimSpace(searchPath) == "" {
		searchPath = DefaultSearchPath
	}
	var q strings.Builder
	args := make([]any, len(names))
	dest := make([]any, len(names))
	oids := make([]*uint32, len(names))
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_catalog.to_regclass($%d::pg_catalog.text)::pg_catalog.oid", i+1)
		args[i] = n.Sanitize()
		dest[i] = &oids[i]
	}
	// Rolled back, not committed: nothing here is meant to last, the search_path included.
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path'::pg_catalog.text, $1::pg_catalog.text, true)`, searchPath)
		if err == nil {
			err = tx.QueryRow(ctx, q.String(), args...).Scan(dest...)
		}
		if rbErr := tx.Rollback(ctx); err == nil {
			err = rbErr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", joinNames(names), err)
	}
	out := make([]uint32, len(names))
	for i, o := range oids {
		if o != nil {
			out[i] = *o
		}
	}
	return out, nil
}

func joinNames(names []pgx.Identifier) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = n.Sanitize()
	}
	return strings.Join(s, ", ")
}

// RelationInfo is a relation found by oid.
type RelationInfo struct {
	Name pgx.Identifier // schema, relation
	Kind string         // pg_class.relkind; empty when there is no such relation
}

// Relation reads a relation's schema-qualified name and kind by oid, in a session whose
// search_path is SafeSearchPath.
func Relation(ctx context.Context, conn *pgx.Conn, oid uint32) (RelationInfo, error) {
	var schema, rel, kind string
	err := conn.QueryRow(ctx, `
		SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, c.relkind::pg_catalog.text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = $1::pg_catalog.oid`, oid).Scan(&schema, &rel, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return RelationInfo{}, nil
	}
	if err != nil {
		return RelationInfo{}, err
	}
	return RelationInfo{Name: pgx.Identifier{schema, rel}, Kind: kind}, nil
}
