package engine_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// A node that stops answering while a submission checks the owner there does not hold the
// submission: the check ends at nodeconn.CheckTimeout with an error naming the node.
func TestSubmitIsBoundedWhenANodeStalls(t *testing.T) {
	defer func(d time.Duration) { nodeconn.CheckTimeout = d }(nodeconn.CheckTimeout)
	nodeconn.CheckTimeout = 2 * time.Second
	e := testenv.NewProxied(t, pgtest.Shared(t))
	e.Node("n1")
	remove := e.Proxy.AddRule(pgtest.Rule{Name: "owner", Match: regexp.MustCompile(`pg_has_role`), Action: pgtest.ActionStall})
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := e.Client.Submit(context.Background(), &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "node n1") {
			t.Errorf("submit with a stalled node: err = %v, want an error naming the node", err)
		}
		if took := time.Since(began); took > 10*time.Second {
			t.Errorf("the submission took %s, want about nodeconn.CheckTimeout", took)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the submission still waits for the stalled node after 20s")
		remove()
		<-done
	}
	if e.Proxy.Hits("owner") == 0 {
		t.Error("the owner check never reached the node")
	}
}
