package engine_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/spec"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
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

// The catalog refuses a conninfo holding a secret itself, for what reaches it through psql
// without the client's parser: deckhand.node_add (admins) and a move_table task's
// source_conninfo in deckhand.submit (submitters). A keyword directly after a quoted value is
// read by libpq and pgx as a keyword of its own.
func TestCatalogRefusesConninfoSecrets(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	conn := e.Pool(e.DB)
	for _, dsn := range []string{
		"host=localhost dbname='app'password=s3cr3t",
		"host=localhost dbname=''sslpassword=s3cr3t",
		"host=localhost password=s3cr3t",
		"postgres://app:s3cr3t@localhost/app",
	} {
		_, err := conn.Exec(ctx, `SELECT deckhand.node_add('leaky', $1)`, dsn)
		if code := sqlState(err); code != "22023" {
			t.Errorf("node_add(%q) = %v, want a refusal (22023)", dsn, err)
		}
		payload, _ := json.Marshal(map[string]string{"table": "t", "to": "n1", "source_conninfo": dsn})
		spec := `{"tasks": [{"name": "m", "kind": "move_table", "node": "n1", "payload": ` + string(payload) + `}]}`
		_, err = conn.Exec(ctx, `SELECT deckhand.submit($1::jsonb)`, spec)
		if code := sqlState(err); code != "22023" || !strings.Contains(err.Error(), "source_conninfo must not contain a password") {
			t.Errorf("submit with source_conninfo %q = %v, want a refusal (22023)", dsn, err)
		}
	}
	var leaked int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM deckhand.node WHERE dsn LIKE '%s3cr3t%')
		+ (SELECT count(*) FROM deckhand.task WHERE payload::text LIKE '%s3cr3t%')`).Scan(&leaked); err != nil || leaked != 0 {
		t.Errorf("%d rows hold the secret (%v)", leaked, err)
	}
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A job over many nodes registered on one server checks its owners there over one
// connection: the node's user may open only one at a time, and 300 nodes' checks pass.
func TestSubmissionChecksEachServerOnce(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n0", 4)
	role := "checker_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	if err := pgtest.CreateLoginRole(ctx, e.Cluster, role, "CONNECTION LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	j := &spec.Job{Description: "over many nodes"}
	for i := range 300 {
		name := fmt.Sprintf("n%d", i+1)
		if err := e.Client.AddNode(ctx, deckhandtype.Node{Name: name, DSN: e.Cluster.DSN(db, role), MaxTasks: 1}); err != nil {
			t.Fatal(err)
		}
		j.Tasks = append(j.Tasks, spec.Task{Name: name, Node: name, SQL: "SELECT 1"})
	}
	if _, err := e.Client.Submit(ctx, j); err != nil {
		t.Fatalf("submit over 300 nodes of one server: %v", err)
	}
}
