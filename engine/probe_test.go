package engine_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// Nodes that do not answer hold up neither the leader's rescue of a dead worker's task nor
// the check of a node that answers: the leader probes sixteen nodes at a time, beside its
// rounds, and records each check as it comes in. Probed one after another in the rounds, the
// ten silent nodes below (named before the one that answers) took 5 s each.
func TestSilentNodesHoldUpNeitherRescueNorOtherChecks(t *testing.T) {
	e := testenv.New(t)
	silent := silentListener(t)
	const silentNodes = 10
	for i := range silentNodes {
		n := deckhandtype.Node{Name: fmt.Sprintf("a-silent-%02d", i), MaxTasks: 1,
			DSN: fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres user=nobody sslmode=disable", silent)}
		if err := e.Client.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	e.AddNode("n1", 4)
	db := e.Pool(e.DB)
	// A worker whose lease runs out in 2 s, with a task it was running.
	dead := catalogtest.Worker(ctx, t, db, &catalogtest.WorkerOpts{LeaseExpiresAt: time.Now().Add(2 * time.Second)})
	job := catalogtest.Job(ctx, t, db, &catalogtest.JobOpts{Tasks: []catalogtest.TaskOpts{
		{Name: "orphan", Kind: "noop", State: deckhandtype.TaskRunning, WorkerID: dead, Attempts: 1}}})

	began := time.Now()
	e.Worker(engine.Config{})
	checked := func(names string) func() bool {
		return func() bool {
			var n int
			err := db.QueryRow(ctx, `SELECT count(*) FROM deckhand.node WHERE name LIKE $1 AND checked_at IS NOT NULL`, names).Scan(&n)
			return err == nil && n == map[string]int{"n1": 1, "a-silent-%": silentNodes}[names]
		}
	}
	testenv.Eventually(t, 3*time.Second, checked("n1"), "n1 is checked while the silent nodes' probes wait")
	if got := e.Wait(job.ID, 4*time.Second); got.State != deckhandtype.JobFinished {
		t.Fatalf("job %s, want the orphan rescued and run again while the silent nodes' probes wait", got.State)
	}
	testenv.Eventually(t, 10*time.Second, checked("a-silent-%"), "every silent node's probe ends")
	var reason string
	if err := db.QueryRow(ctx, `SELECT last_error FROM deckhand.node WHERE name = 'a-silent-00'`).Scan(&reason); err != nil || reason == "" {
		t.Errorf("a silent node's check says %q (%v), want why its probe failed", reason, err)
	}
	t.Logf("n1 checked, the orphan rescued and every silent node's probe ended %s after the worker started", time.Since(began).Round(time.Millisecond))
}

// silentListener accepts connections on a port of 127.0.0.1 and never answers them.
func silentListener(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}
