package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// A node that stops answering while a submission checks its owner roles there (a network
// that drops its packets) holds a POST no longer than the request's deadline, and the answer
// is the one the API gives whenever a deadline ends what it waits for: 503, with one line
// that names the node. The same when the node's own check timeout ends first.
func TestStalledNodeCheckIs503(t *testing.T) {
	for _, c := range []struct {
		name         string
		write, check time.Duration // the POST's deadline, the node check's own timeout
	}{
		{"request deadline", 3 * time.Second, time.Minute},
		{"check timeout", time.Minute, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			restore := api.SetRequestTimeouts(10*time.Second, c.write)
			t.Cleanup(restore) // after the server's own cleanup, which closes it
			defer func(d time.Duration) { nodeconn.CheckTimeout = d }(nodeconn.CheckTimeout)
			nodeconn.CheckTimeout = c.check
			h := newHarness(t)
			proxy := pgtest.ProxyTo(t, h.Cluster)
			node := deckhandtype.Node{Name: "far", DSN: proxy.DSN(pgtest.NewDatabase(t), pgcluster.Superuser), MaxTasks: 2}
			if err := h.Client.AddNode(ctx, node); err != nil {
				t.Fatal(err)
			}
			remove := proxy.AddRule(pgtest.Rule{Name: "owner", Match: regexp.MustCompile(`pg_has_role`), Action: pgtest.ActionStall})
			defer remove()

			began := time.Now()
			r := h.do("POST", "/api/jobs", `{"tasks": [{"name": "a", "node": "far", "sql": "SELECT 1"}]}`)
			took := time.Since(began)
			var e struct{ Error string }
			r.json(t, &e)
			if r.code != http.StatusServiceUnavailable || strings.Count(r.body, "\n") != 1 ||
				!strings.HasPrefix(e.Error, "node far did not answer in time: ") {
				t.Errorf("POST /api/jobs with node far stalled: %d %s, want 503 saying node far did not answer in time",
					r.code, strings.TrimSpace(r.body))
			}
			if limit := min(c.write, c.check) + 5*time.Second; took > limit {
				t.Errorf("the answer took %s, want at most %s", took.Round(time.Millisecond), limit)
			}
			if proxy.Hits("owner") == 0 {
				t.Error("the owner check never reached the node")
			}
		})
	}
}
