package api_test

import (
	"testing"
	"time"
)

// When the server's catalog listener is cut, open streams get hello again once it is back
// (notifications may have been missed meanwhile), and changes flow again.
func TestEventsSayHelloAgainAfterTheListenerReconnects(t *testing.T) {
	h := newHarness(t)
	s := h.events()
	s.waitFor(t, 10*time.Second, "hello", func(ev sseEvent) bool { return ev.name == "hello" })
	var pid uint32
	err := h.Pool(h.DB).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'deckhand notifier'`).Scan(&pid)
	if err != nil {
		t.Fatalf("the server's listener: %v", err)
	}
	h.Exec(h.DB, `SELECT pg_terminate_backend($1)`, pid)
	s.waitFor(t, 10*time.Second, "hello after the reconnect", func(ev sseEvent) bool { return ev.name == "hello" })
	h.worker()
	h.Wait(h.submit(noopJob("after the reconnect", 1)), 20*time.Second)
	s.waitFor(t, 10*time.Second, "a change", func(ev sseEvent) bool { return ev.name == "change" })
}
