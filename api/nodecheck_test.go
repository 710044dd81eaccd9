package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// A node whose registered user may not connect to the node's database refuses it with
// insufficient_privilege, the SQLSTATE the catalog uses to refuse a caller's role: the
// refusal is still the node's (502, naming the node), not the catalog refusing the caller.
func TestNodeRefusingItsUserTheDatabaseIsNotTheCatalogRefusingTheCaller(t *testing.T) {
	h := newHarness(t)
	db := pgtest.NewDatabase(t)
	nodeUser := h.Role("nodeuser")
	h.Exec("postgres", "REVOKE CONNECT ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC")
	if err := h.Client.AddNode(ctx, deckhandtype.Node{Name: "noconnect", DSN: h.Cluster.DSN(db, nodeUser), MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	alice := h.catalogUser("alice", "deckhand_submitter")
	r := h.do("POST", "/api/jobs", `{"tasks": [{"name": "a", "node": "noconnect", "sql": "SELECT 1"}]}`, "Authorization", alice.basic())
	var e struct{ Error string }
	r.json(t, &e)
	if r.code != http.StatusBadGateway || !strings.Contains(e.Error, "node noconnect") {
		t.Errorf("submitting to a node that refuses its user the database: %d %q, want 502 naming the node", r.code, e.Error)
	}
}

// A node that refuses connections is said to once in the 502, not once per connection attempt.
func TestNodeRefusingConnectionsIsReportedOnce(t *testing.T) {
	h := newHarness(t)
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d dbname=x user=nobody", pgtest.FreePort(t))
	if err := h.Client.AddNode(ctx, deckhandtype.Node{Name: "down", DSN: dsn, MaxTasks: 2}); err != nil {
		t.Fatal(err)
	}
	alice := h.catalogUser("alice", "deckhand_submitter")
	r := h.do("POST", "/api/jobs", `{"tasks": [{"name": "a", "node": "down", "sql": "SELECT 1"}]}`, "Authorization", alice.basic())
	var e struct{ Error string }
	r.json(t, &e)
	if r.code != http.StatusBadGateway || strings.Count(e.Error, "connection refused") != 1 {
		t.Errorf("submitting to a node that refuses connections: %d %q, want 502 saying so once", r.code, e.Error)
	}
}
