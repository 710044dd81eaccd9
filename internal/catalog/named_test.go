package catalog

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// A statement's named arguments are rewritten once, in the order pgx gives them, and each run
// must pass exactly the names it uses.
func TestNamedArguments(t *testing.T) {
	n := mustNamed(`SELECT @b::int, '@notarg', @a::int -- @comment
		+ @b::int, '{1}'::int[] @> ARRAY[@a::int]`)
	if n.sql != `SELECT $1::int, '@notarg', $2::int -- @comment
		+ $1::int, '{1}'::int[] @> ARRAY[$2::int]` {
		t.Errorf("rewritten: %s", n.sql)
	}
	args, err := n.args(pgx.StrictNamedArgs{"a": 1, "b": 2})
	if err != nil || len(args) != 2 || args[0] != 2 || args[1] != 1 {
		t.Errorf("args: %v, %v", args, err)
	}
	if _, err := n.args(pgx.StrictNamedArgs{"a": 1}); err == nil {
		t.Error("a missing argument was accepted")
	}
	if _, err := n.args(pgx.StrictNamedArgs{"a": 1, "b": 2, "c": 3}); err == nil {
		t.Error("an argument the statement does not use was accepted")
	}
	statements := []named{completeStmt}
	for _, s := range claimStatements {
		statements = append(statements, s)
	}
	for _, s := range statements {
		if len(s.names) == 0 || argName.MatchString(s.sql) {
			t.Errorf("not rewritten: %v", s.names)
		}
	}
}
