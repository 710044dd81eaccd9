package engine_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// hostileListener answers every startup, after delay, with a FATAL error whose message
// is not UTF-8 (as a server with another encoding, a pooler, or anything else listening where
// a node's conninfo points may). It returns its port and the number of errors it sent.
func hostileListener(t *testing.T, delay time.Duration) (int, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				if _, err := be.ReceiveStartupMessage(); err != nil {
					return
				}
				time.Sleep(delay)
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28000",
					Message: "r\xf4le \xab nobody \xbb n'existe pas"})
				if be.Flush() == nil {
					sent.Add(1)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port, &sent
}

// A node whose failed probe says something in bytes that are not UTF-8 costs no other node its
// check, and has its own recorded. Every node answers at once, so that checks come in while
// the first is written and the hostile node's shares a batch with healthy ones.
func TestHostileNodeAnswerCostsNoOtherNodeItsCheck(t *testing.T) {
	e := testenv.New(t)
	good := []string{"c-00", "c-01", "c-02", "c-03", "c-04"}
	for _, n := range good {
		e.AddNode(n, 4)
	}
	port, sent := hostileListener(t, 0)
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "b-evil", MaxTasks: 1,
		DSN: fmt.Sprintf("host=127.0.0.1 port=%d dbname=postgres user=nobody sslmode=disable", port)}); err != nil {
		t.Fatal(err)
	}
	db := e.Pool(e.DB)
	// Probing every 10 s: the assertions below are over before the second round.
	e.Worker(engine.Config{MaintenanceInterval: 2 * time.Second, LeaseTTL: 10 * time.Second})
	testenv.Eventually(t, 5*time.Second, func() bool { return sent.Load() > 0 }, "the hostile node is probed")
	testenv.Eventually(t, 3*time.Second, func() bool {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM deckhand.node WHERE name LIKE 'c-%' AND checked_at IS NOT NULL`).Scan(&n)
		return err == nil && n == len(good)
	}, "every healthy node's check is recorded beside the hostile node's")
	var evilError string
	testenv.Eventually(t, 3*time.Second, func() bool {
		return db.QueryRow(ctx, `SELECT coalesce(last_error, '') FROM deckhand.node WHERE name = 'b-evil' AND checked_at IS NOT NULL`).Scan(&evilError) == nil
	}, "the hostile node's check is recorded")
	if !strings.Contains(evilError, "n'existe pas") {
		t.Errorf("node b-evil's check says %q, want the node's words", evilError)
	}
}
