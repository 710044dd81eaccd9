package catalog

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
)

// named is a statement with @named arguments, rewritten to $n ones once: pgx would scan the
// text for names on every run, and claims and completions run hundreds of times a second.
// args checks the arguments as pgx.StrictNamedArgs does: every name the statement uses, and
// no other.
type named struct {
	sql   string
	names []string // the name of $1, $2, ...
}

var argName = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

func mustNamed(sql string) named {
	// pgx's own rewrite, with a marker for each name it finds, tells which name became $n
	// (it skips what looks like a name inside strings and comments).
	markers := pgx.NamedArgs{}
	for _, m := range argName.FindAllStringSubmatch(sql, -1) {
		markers[m[1]] = m[1]
	}
	rewritten, order, err := markers.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		panic(fmt.Sprintf("catalog: rewriting named arguments: %v", err))
	}
	n := named{sql: rewritten}
	for _, o := range order {
		n.names = append(n.names, o.(string))
	}
	return n
}

// args lists values by position.
func (n named) args(values pgx.StrictNamedArgs) ([]any, error) {
	if len(values) != len(n.names) {
		for k := range values {
			if !slices.Contains(n.names, k) {
				return nil, fmt.Errorf("argument %q is not used by the statement", k)
			}
		}
	}
	out := make([]any, len(n.names))
	for i, name := range n.names {
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("argument %q is missing", name)
		}
		out[i] = v
	}
	return out, nil
}

// argsOf lists, by position, those of values the statement takes: for statements built in
// variants, of which some leave out what others take.
func (n named) argsOf(values pgx.StrictNamedArgs) ([]any, error) {
	used := pgx.StrictNamedArgs{}
	for k, v := range values {
		if n.uses(k) {
			used[k] = v
		}
	}
	return n.args(used)
}

// uses reports whether the statement takes the argument name.
func (n named) uses(name string) bool { return slices.Contains(n.names, name) }
