package export

import (
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Request is what `deckhand export` asks for.
type Request struct {
	Table       string // the partitioned table (or a plain table)
	Partition   string // the leaf partition; empty exports Table itself, which must be plain
	Group       string // node group: the primary coordinates, any member may export parts
	To          string // destination URL
	Force       bool
	MaxAttempts int
	PartSize    int64
	Compression string
	Owner       string // role the export reads as; empty: the submitter
	Timeout     time.Duration
}

// Normalize fills defaults and checks the request without a database; errors are one line.
// Table and Partition are read as PostgreSQL reads names (unquoted parts fold to lower case,
// double-quoted ones are taken as written; no schema means public) and rewritten in one
// canonical spelling; To is rewritten in its normal form (see NormalizeDestination).
func (r *Request) Normalize() error {
	r.Table = strings.TrimSpace(r.Table)
	r.Partition = strings.TrimSpace(r.Partition)
	if r.Table == "" {
		return spec.Invalidf("--table is required")
	}
	if r.Partition == "" {
		r.Partition = r.Table
	}
	var err error
	if r.Table, err = canonicalName(r.Table); err != nil {
		return spec.Invalidf("--table: %v", err)
	}
	if r.Partition, err = canonicalName(r.Partition); err != nil {
		return spec.Invalidf("--partition: %v", err)
	}
	if r.Group == "" {
		return spec.Invalidf("--group is required")
	}
	if r.To == "" {
		return spec.Invalidf("--to is required")
	}
	if r.To, err = NormalizeDestination(r.To); err != nil {
		return spec.Invalidf("%v", err)
	}
	if r.Compression == "" {
		r.Compression = DefaultCompression
	}
	if !slices.Contains(Compressions, r.Compression) {
		return spec.Invalidf("--compression %q: use one of %s", r.Compression, strings.Join(Compressions, ", "))
	}
	if r.PartSize == 0 {
		r.PartSize = DefaultPartSize
	}
	if r.PartSize < 8192 {
		return spec.Invalidf("--part-size must be at least 8kB")
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 5
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > spec.MaxMaxAttempts {
		return spec.Invalidf("--max-attempts must be between 1 and %d", spec.MaxMaxAttempts)
	}
	if r.Timeout == 0 {
		r.Timeout = 24 * time.Hour
	}
	return nil
}

// Record turns a normalized request into the export to submit; its coordinator runs on
// primary as owner.
func (r *Request) Record(primary, owner string) catalog.NewExport {
	return catalog.NewExport{
		SourceTable: r.Table, Partition: r.Partition, Group: r.Group, Primary: primary, Owner: owner,
		Destination: r.To, Compression: r.Compression, PartSize: r.PartSize, Force: r.Force,
		MaxAttempts: r.MaxAttempts, Timeout: r.Timeout,
	}
}

// plainName is a name part that needs no quotes: it reads back as itself.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// canonicalName reads a table name as PostgreSQL does and spells it schema.name, quoting only
// the parts that need it: `Mixed` becomes public.mixed and `"Mixed"` public."Mixed".
func canonicalName(s string) (string, error) {
	id, err := qualifiedName(s)
	if err != nil {
		return "", err
	}
	parts := make([]string, len(id))
	for i, p := range id {
		if plainName.MatchString(p) {
			parts[i] = p
		} else {
			parts[i] = pgx.Identifier{p}.Sanitize()
		}
	}
	return strings.Join(parts, "."), nil
}

// qualifiedName parses a name with nodeconn.ParseQualifiedName, the one rule deckhand reads
// table names by, into schema and name (public when no schema is given).
func qualifiedName(s string) (pgx.Identifier, error) {
	id, err := nodeconn.ParseQualifiedName(s)
	if err != nil {
		return nil, err
	}
	if len(id) == 1 {
		id = pgx.Identifier{"public", id[0]}
	}
	return id, nil
}
