package move

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

// A placement names a schema (or a table) by its name alone: routers send everything of that
// name to the one group it names. So a move must not place a name that a group other than its
// source and target also holds: the placement would send that group's tenant (another
// database's schema of the same name, maybe another role's) to the move's target, and refuse
// that tenant's own moves as placed elsewhere. The target is checked by targetTaken.
//
// heldElsewhere asks, for every group of the catalog but the move's two, the group's primary
// (every member, when the catalog knows of no primary in it) whether its database holds the
// moved schema, or for a table move each moved table. It connects as the user each node's
// conninfo names (nodeconn.Held), never as the move's owner: the owner may have no login on
// a group that holds the name, and a check that passes when it cannot look would let any
// owner place a name over another tenant's. A node that cannot be asked fails the check
// (retryably): the move waits rather than guess. It runs before the move creates anything,
// again before the cut-over, and a last time after it and before the switch, so that a name
// created elsewhere during the move fails the move (everything it made is removed) rather
// than be placed over.
func (m Mover) heldElsewhere(ctx context.Context, p Payload) error {
	nodes, err := m.Cleaner.Catalog.Nodes(ctx)
	if err != nil {
		return err
	}
	var names []pgx.Identifier
	if p.Schema != "" {
		names = []pgx.Identifier{{p.Schema}}
	}
	for _, t := range p.Tables {
		names = append(names, pgx.Identifier{t[0], t[1]})
	}
	// Each group's primary is asked, or every member of a group with none known; a former
	// primary that no longer answers beside the one promoted is not (deckhandtype.Primaries).
	ask := map[string]bool{}
	for _, n := range nodes {
		members, primaries := deckhandtype.Primaries(nodes, n.Group)
		if len(primaries) == 0 {
			primaries = members
		}
		for _, a := range primaries {
			ask[a.Name] = true
		}
	}
	held := map[string][]string{} // what each other group holds, by group
	var where []string            // "g3 (node n3)", once per group
	for _, n := range nodes {
		if n.Group == p.From || n.Group == p.To || !ask[n.Name] || held[n.Group] != nil {
			continue
		}
		found, err := nodeconn.Held(ctx, m.Cleaner.Pools, n.DSN, names)
		if err != nil {
			return fmt.Errorf("check whether group %s (node %s) holds %s too: %w", n.Group, n.Name, p.What(), err)
		}
		if len(found) == 0 {
			continue
		}
		for _, f := range found {
			held[n.Group] = append(held[n.Group], displayName(f...))
		}
		where = append(where, fmt.Sprintf("%s (node %s)", n.Group, n.Name))
	}
	if len(where) == 0 {
		return nil
	}
	slices.Sort(where)
	var what []string
	for _, g := range held {
		for _, name := range g {
			if !slices.Contains(what, name) {
				what = append(what, name)
			}
		}
	}
	slices.Sort(what)
	kind := "schema "
	switch {
	case p.Schema == "" && len(what) == 1:
		kind = "table "
	case p.Schema == "":
		kind = "tables "
	}
	groups := "group " + where[0]
	if len(where) > 1 {
		groups = "groups " + strings.Join(where, ", ")
	}
	return refusal("%s%s also exists on %s: a placement names one group per name, so placing it on %s would route theirs there too; "+
		"rename or drop it there first", kind, strings.Join(what, ", "), groups, p.To)
}
