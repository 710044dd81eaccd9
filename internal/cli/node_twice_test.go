package cli_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// One server registered twice in a group, under two names whose conninfos reach it by
// different routes (its address, its socket), reads as a group of two primaries, and every
// export, move and rebalance of the group is refused later. node add refuses the second name
// at once, in one line naming the first (also when the group is the one a re-added node is in); a standby of the group, the same server in another
// group and the same node re-added with another route to its server are all still taken.
func TestNodeAddRefusesAServerRegisteredInTheGroupUnderAnotherName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	primary := pgtest.New(t, pgcluster.Options{})
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	viaAddress := primary.DSN("postgres", pgcluster.Superuser)
	viaSocket := pgcluster.DSN(primary.Dir, primary.Port, "postgres", pgcluster.Superuser)

	want(t, e.run("node", "add", "p1", "--group", "g", "--dsn", viaAddress), 0)
	want(t, e.run("node", "add", "s1", "--group", "g", "--dsn", standby.DSN("postgres", pgcluster.Superuser)), 0)

	r := e.run("node", "add", "p2", "--group", "g", "--dsn", viaSocket)
	t.Logf("%s", r.stderr)
	wantOneLineError(t, r, cli.ExitUsage, "node p2", "node p1 of group g already reaches", "system identifier")

	// The same server in a group of its own, and p1 re-added with the socket route.
	want(t, e.run("node", "add", "p3", "--group", "h", "--dsn", viaSocket), 0)
	want(t, e.run("node", "add", "p1", "--dsn", viaSocket), 0)
	// Re-added without --group, s1 stays in g, where p1 reaches the primary already.
	r = e.run("node", "add", "s1", "--dsn", viaAddress)
	wantOneLineError(t, r, cli.ExitUsage, "node s1", "node p1 of group g already reaches")

	nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json"))
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name+"/"+n.Group)
	}
	if got := strings.Join(names, " "); got != "p1/g p3/h s1/g" {
		t.Errorf("nodes %s, want p1/g p3/h s1/g", got)
	}
}
