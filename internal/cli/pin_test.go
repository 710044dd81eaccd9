package cli_test

import (
	"strings"
	"testing"
)

// A pin on a node the catalog does not have (a misspelt name) would hold nothing back while
// its author believes the table kept: it is refused, as drop refuses such a node, and nothing
// is pinned.
func TestPinOnAnUnknownNodeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("eu1", 4)
	wantUsage(t, e.run("cleanup", "pin", "--node", "eu9", "--reason", "legal hold", "public.orders"),
		`unknown node "eu9"`, "deckhand node list")
	r := e.run("cleanup", "pins", "-o", "json")
	if want(t, r, 0); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("the refused pin was written: %s", r.stdout)
	}
	want(t, e.run("cleanup", "pin", "--node", "eu1", "--reason", "legal hold", "public.orders"), 0)
	// Objects in a bucket name no node.
	want(t, e.run("cleanup", "pin", "--bucket", "s3://archive", "--type", "prefix", "exports/2019/"), 0)
}
