package export_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
)

// Advisory locks need no privilege, and hashtext is anyone's to call: submissions of exports
// to one destination serialized on an advisory lock whose key any role could compute from
// the destination. A role with no deckhand role at all that took that key and kept it held
// every export to that destination, an admin's included, waiting for as long as it liked.
func TestAttackHeldAdvisoryLockHoldsBackNoExport(t *testing.T) {
	e, _ := single(t)
	dest := "file://" + t.TempDir() + "/facts"
	nobody := e.Role("nobody")
	conn, err := pgx.Connect(ctx, e.RoleDSN(nobody))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtext('deckhand export ' || $1))`, dest); err != nil {
		t.Fatal(err)
	}
	e.Worker(engine.Config{})
	start, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	x, err := export.Start(start, e.Client, export.Request{Table: "facts", Group: "n1", To: dest})
	if err != nil {
		t.Fatalf("an admin's export while a role holds an advisory lock: %v", err)
	}
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
}
