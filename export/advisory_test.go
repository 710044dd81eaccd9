package export_test

import (
	"context"
	"strings"
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

// A submission locks its destination's row until its transaction ends: one that called
// deckhand.submit_export and kept its transaction open held back every other submission to
// that destination, an admin's forced export included, without end. The wait is bounded, and
// the refusal says what holds it.
func TestAttackOpenSubmissionHoldsBackNoExportForLong(t *testing.T) {
	e, _ := single(t)
	dest := "file://" + t.TempDir() + "/facts"
	holder, err := e.Pool(e.DB).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background()) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT deckhand.submit_export('facts', 'facts', 'n1', 'n1', NULL, $1)`, dest); err != nil {
		t.Fatal(err)
	}
	start, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	began := time.Now()
	_, err = export.Start(start, e.Client, export.Request{Table: "facts", Group: "n1", To: dest, Force: true})
	took := time.Since(began)
	if err == nil || took > 8*time.Second || !strings.Contains(err.Error(), "transaction that has not ended") {
		t.Fatalf("an export to a destination whose row an open submission holds ended after %s with %v; want a refusal within seconds saying another submission's transaction holds it",
			took.Round(time.Millisecond), err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := export.Start(ctx, e.Client, export.Request{Table: "facts", Group: "n1", To: dest})
	if err != nil {
		t.Fatalf("the export once the other submission ended: %v", err)
	}
	e.Worker(engine.Config{})
	waitJob(t, e, x.JobID, deckhandtype.JobFinished)
}
