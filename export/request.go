package export

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/catalog"
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

func invalid(format string, args ...any) error { return &spec.Error{Msg: fmt.Sprintf(format, args...)} }

// Normalize fills defaults and checks the request without a database; errors are one line.
func (r *Request) Normalize() error {
	r.Table = strings.TrimSpace(r.Table)
	r.Partition = strings.TrimSpace(r.Partition)
	if r.Table == "" {
		return invalid("--table is required")
	}
	if r.Partition == "" {
		r.Partition = r.Table
	}
	if r.Group == "" {
		return invalid("--group is required")
	}
	if r.To == "" {
		return invalid("--to is required")
	}
	if _, err := ParseDestination(r.To); err != nil {
		return invalid("%v", err)
	}
	if r.Compression == "" {
		r.Compression = DefaultCompression
	}
	if !slices.Contains(Compressions, r.Compression) {
		return invalid("--compression %q: use one of %s", r.Compression, strings.Join(Compressions, ", "))
	}
	if r.PartSize == 0 {
		r.PartSize = DefaultPartSize
	}
	if r.PartSize < 8192 {
		return invalid("--part-size must be at least 8kB")
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 5
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > spec.MaxMaxAttempts {
		return invalid("--max-attempts must be between 1 and %d", spec.MaxMaxAttempts)
	}
	if r.Timeout == 0 {
		r.Timeout = 24 * time.Hour
	}
	return nil
}

// Records turns a normalized request into the catalog rows: the export and its job, whose
// coordinator task runs on primary as owner (it finds its export through its job).
func (r *Request) Records(primary, owner string) (catalog.NewExport, catalog.NewJob) {
	e := catalog.NewExport{
		SourceTable: r.Table, Partition: r.Partition, Group: r.Group, Destination: r.To,
		Compression: r.Compression, PartSize: r.PartSize, Force: r.Force,
	}
	j := catalog.NewJob{
		Description: fmt.Sprintf("export %s to %s", r.Partition, r.To),
		Kind:        KindCoordinator,
		Tasks: []catalog.NewTask{{
			Name: "coordinator", Kind: KindCoordinator, Node: primary, Owner: owner,
			InTransaction: true, MaxAttempts: r.MaxAttempts, Timeout: r.Timeout,
		}},
	}
	return e, j
}
