package cli_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A node the leader's probe cannot reach keeps the role it last had: after a failover the old
// primary, down, reads primary beside the promoted standby. node list says that it does not
// answer, so that the listing does not show a group of two primaries without a word.
func TestNodeListSaysWhichNodesDoNotAnswer(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	e.AddNode("n2", 4)
	cat := e.Client.Catalog()
	if err := cat.RecordNodeCheck(context.Background(), "n1", "primary", "0/3000000", errors.New("connection refused")); err != nil {
		t.Fatal(err)
	}
	if err := cat.RecordNodeCheck(context.Background(), "n2", "primary", "0/3000000", nil); err != nil {
		t.Fatal(err)
	}
	out := clitest.Run(t, e.DSN, "node", "list")
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		switch fields[0] {
		case "n1":
			if !strings.Contains(line, "primary (not answering)") {
				t.Errorf("n1: %q, want its role said not answering", line)
			}
		case "n2":
			if strings.Contains(line, "not answering") {
				t.Errorf("n2: %q, want it plainly primary", line)
			}
		}
	}
}

// The probe's error for a node that refuses connections says so once, on one line: pgx's
// report of the attempt over TLS and the plain one repeated it.
func TestNodeListGivesAProbeErrorOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want(t, e.run("node", "add", "down", "--dsn", fmt.Sprintf("host=127.0.0.1 port=%d dbname=x user=postgres", pgtest.FreePort(t))), 0)
	e.worker()
	var lastError string
	testenv.Eventually(t, 30*time.Second, func() bool {
		nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json"))
		if len(nodes) == 1 && nodes[0].LastError != nil {
			lastError = *nodes[0].LastError
			return true
		}
		return false
	}, "the leader's probe of the node that is down")
	if strings.Count(lastError, "connection refused") != 1 || strings.Contains(lastError, "\n") {
		t.Errorf("last_error should say once, on one line, that the connection was refused: %q", lastError)
	}
}
