package cli_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// node add asks every other member of the group which server it reaches. Members whose
// servers accept connections and never answer (a hung host, a dropped route) were asked one
// after another, each for nodeconn.IdentifyTimeout: a group of many such standbys held the
// command for that long times their number. They are asked at once: the command waits for
// the slowest alone.
func TestNodeAddAsksTheGroupsMembersAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	server := pgtest.New(t, pgcluster.Options{})
	const members = 4
	var ports []int
	for i := range members {
		port := pgtest.FreePort(t)
		ports = append(ports, port)
		// Nothing listens yet: the member is registered without being asked anything.
		want(t, e.run("node", "add", fmt.Sprintf("s%d", i), "--group", "g", "--dsn",
			pgcluster.DSN("127.0.0.1", port, "postgres", pgcluster.Superuser)), 0)
	}
	// Now each accepts and never answers.
	for _, port := range ports {
		pgtest.AcceptSilently(t, port)
	}
	began := time.Now()
	want(t, e.run("node", "add", "p", "--group", "g", "--dsn", server.DSN("postgres", pgcluster.Superuser)), 0)
	if took := time.Since(began); took > nodeconn.IdentifyTimeout+3*time.Second {
		t.Errorf("node add beside %d members that never answer took %s", members, took.Round(time.Millisecond))
	}
}
