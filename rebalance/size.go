package rebalance

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Primaries returns the node each group's moves use: its primary, or its only node while the
// leader has not yet probed it. A group that is unknown, or has several nodes of which none is
// known to be the primary, is refused.
func Primaries(nodes []deckhandtype.Node, groups []string) (map[string]deckhandtype.Node, error) {
	members := map[string][]deckhandtype.Node{}
	for _, n := range nodes {
		members[n.Group] = append(members[n.Group], n)
	}
	out := make(map[string]deckhandtype.Node, len(groups))
	for _, g := range groups {
		ns := members[g]
		_, primaries := deckhandtype.Primaries(ns, g)
		switch {
		case len(ns) == 0:
			return nil, spec.Invalidf("--groups: no node is in group %q (see `deckhand node list`)", g)
		case len(primaries) == 1:
			out[g] = primaries[0]
		case len(primaries) == 0 && len(ns) == 1:
			out[g] = ns[0]
		case len(primaries) == 0:
			return nil, spec.Invalidf("group %q has no node known to be its primary yet (a running `deckhand serve` probes nodes)", g)
		default:
			return nil, spec.Invalidf("group %q has %d primaries (%s, %s): fix its nodes first", g, len(primaries), primaries[0].Name, primaries[1].Name)
		}
	}
	return out, nil
}

// Candidates says which schemas a rebalance may move. PostgreSQL's own schemas never;
// public only when a pattern names it, as tenants seldom live there; else those that match
// the pattern (path.Match syntax: *, ?, [a-z]), or all when there is none.
type Candidates struct{ Pattern string }

// Check refuses a pattern path.Match cannot read.
func (c Candidates) Check() error {
	if _, err := path.Match(c.Pattern, ""); err != nil {
		return spec.Invalidf("--schemas %q: %v (use *, ? and [a-z])", c.Pattern, err)
	}
	return nil
}

// Match reports whether schema is a candidate.
func (c Candidates) Match(schema string) bool {
	if strings.HasPrefix(schema, "pg_") || schema == "information_schema" {
		return false
	}
	if c.Pattern == "" {
		return schema != "public"
	}
	ok, _ := path.Match(c.Pattern, schema)
	return ok && (schema != "public" || !strings.ContainsAny(c.Pattern, "*?["))
}

// Sizing is what the primaries hold: the candidate schemas, and why others were left out.
type Sizing struct {
	Schemas []Schema `json:"schemas"`
	Skipped []string `json:"skipped,omitempty"` // one line per schema left out, with the reason
}

// sizeSQL lists the schemas the session's role may use, with the bytes of their tables and
// materialized views (pg_total_relation_size: heap, indexes, TOAST). It runs in a session as
// the rebalance's owner, who may have created functions and operators of its own: every
// name is pg_catalog's, with exact argument types. Tables of schemas the owner may not use
// are neither listed nor sized, so a rebalance tells its submitter no more than the owner
// could read.
const sizeSQL = `
	SELECT n.nspname::pg_catalog.text,
	       coalesce(pg_catalog.sum(pg_catalog.pg_total_relation_size(c.oid::pg_catalog.regclass)), 0)::pg_catalog.int8
	FROM pg_catalog.pg_namespace n
	LEFT JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid
	     AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'm']::pg_catalog."char"[])
	WHERE pg_catalog.has_schema_privilege(n.oid, 'USAGE'::pg_catalog.text)
	GROUP BY n.nspname`

// Size reads the candidate schemas of every group's primary, each in a session logged in as
// owner that the node itself confirmed submitter may act as (nodeconn.Pools.OwnerConn). A
// schema found on more than one group, or in exclude (being moved already), is skipped.
func Size(ctx context.Context, pools *nodeconn.Pools, primaries map[string]deckhandtype.Node, owner, submitter string,
	c Candidates, exclude map[string]string) (Sizing, error) {
	groups := make([]string, 0, len(primaries))
	for g := range primaries {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	found := map[string][]Schema{}
	for _, g := range groups {
		n := primaries[g]
		conn, err := pools.OwnerConn(ctx, nodeconn.Owner{Node: n.Name, DSN: n.DSN, Role: owner, Submitter: submitter})
		if err != nil {
			return Sizing{}, fmt.Errorf("size the schemas of group %s: %w", g, err)
		}
		rows, _ := conn.Query(ctx, sizeSQL)
		sizes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Name  string
			Bytes int64
		}])
		nodeconn.Release(ctx, conn)
		if err != nil {
			return Sizing{}, fmt.Errorf("size the schemas of group %s on node %s: %w", g, n.Name, err)
		}
		for _, s := range sizes {
			if c.Match(s.Name) {
				found[s.Name] = append(found[s.Name], Schema{Name: s.Name, Group: g, Bytes: s.Bytes})
			}
		}
	}
	var out Sizing
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		at := found[name]
		switch {
		case exclude[name] != "":
			out.Skipped = append(out.Skipped, fmt.Sprintf("schema %s: %s", pgx.Identifier{name}.Sanitize(), exclude[name]))
		case len(at) > 1:
			gs := make([]string, len(at))
			for i, s := range at {
				gs[i] = s.Group
			}
			out.Skipped = append(out.Skipped, fmt.Sprintf("schema %s: on groups %s at once", pgx.Identifier{name}.Sanitize(), strings.Join(gs, ", ")))
		default:
			out.Schemas = append(out.Schemas, at[0])
		}
	}
	slices.SortFunc(out.Schemas, func(a, b Schema) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
