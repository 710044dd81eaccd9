package engine_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// Client.AddNode refuses a conninfo holding a secret in any spelling, as invalid input whose
// message does not repeat it, and registers nothing; a URL conninfo without one is taken.
func TestAddNodeRefusesSecrets(t *testing.T) {
	e := testenv.New(t)
	for _, dsn := range []string{
		"host=localhost password=s3cr3t",
		"host=localhost Password = 's3cr3t'",
		"host=localhost sslpassword=s3cr3t",
		"host=localhost dbname='postgres://app:s3cr3t@other/app'",
		"postgres://app:s3cr3t@localhost/app",
		"postgresql://app@localhost/app?PassWord=s3cr3t",
		"postgres://app@localhost/app?%73slpassword=s3cr3t",
		"Postgres://app:s3cr3t@localhost/app",
	} {
		err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "leaky", DSN: dsn})
		if err == nil || !engine.IsInvalid(err) || !strings.Contains(err.Error(), "must not contain a password") {
			t.Errorf("AddNode(%q) = %v, want a refusal", dsn, err)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("AddNode(%q) repeats the secret: %v", dsn, err)
		}
	}
	if nodes, err := e.Client.Nodes(ctx); err != nil || len(nodes) != 0 {
		t.Fatalf("nodes = %+v, %v; want none", nodes, err)
	}
	url := "postgres://" + e.Cluster.Addr() + "/postgres?sslmode=disable&application_name=deckhand%20node"
	if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: "byurl", DSN: url}); err != nil {
		t.Fatalf("AddNode(%q): %v", url, err)
	}
}
