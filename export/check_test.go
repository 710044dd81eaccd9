package export_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A primary that stops answering while the submission checks the partition there (a network
// partition, a server that hangs) does not hold the submission: the checks on a node, connect
// included, end at nodeconn.CheckTimeout with an error naming the node.
func TestExportSubmissionIsBoundedWhenThePrimaryStalls(t *testing.T) {
	defer func(d time.Duration) { nodeconn.CheckTimeout = d }(nodeconn.CheckTimeout)
	nodeconn.CheckTimeout = 2 * time.Second
	e := testenv.NewProxied(t, pgtest.Shared(t), export.Feature())
	db := e.Node("n1")
	e.NodeExec(db, `CREATE TABLE facts (id bigint NOT NULL)`)
	// The owner check passes; the partition check's first statement stalls.
	remove := e.Proxy.AddRule(pgtest.Rule{Name: "lookup", Match: regexp.MustCompile(`relnamespace`), Action: pgtest.ActionStall})
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: "file://" + t.TempDir()})
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(began)
		if err == nil || !strings.Contains(err.Error(), "node n1") {
			t.Errorf("export with a stalled primary: err = %v, want an error naming the node", err)
		}
		if took > 10*time.Second {
			t.Errorf("the submission took %s, want about nodeconn.CheckTimeout", took)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the submission still waits for the stalled primary after 20s")
		remove()
		<-done
	}
	if e.Proxy.Hits("lookup") == 0 {
		t.Error("the partition check never reached the primary")
	}
}
