package engine_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A running worker whose catalog connections land on a read-only server (a standby, reached
// through a conninfo without target_session_attrs=read-write after a failover) logs, with
// each failed claim or heartbeat, that the catalog server is read-only and what to change,
// not only PostgreSQL's "cannot execute UPDATE in a read-only transaction". The database made
// read-only for new sessions stands in for the standby.
func TestWorkerOnAReadOnlyCatalogSaysSo(t *testing.T) {
	e := testenv.New(t)
	var logs testenv.Buffer
	e.Worker(engine.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	admin := e.Pool(e.DB)
	db := pgx.Identifier{e.DB}.Sanitize()
	reconnect := func() {
		t.Helper()
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'deckhand'`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	// Runs before the worker's own cleanup: it stops on a writable catalog.
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` RESET default_transaction_read_only`); err != nil {
			t.Error(err)
		}
		reconnect()
	})
	reconnect()
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "target_session_attrs=read-write")
	}, "the worker logs that the catalog server is read-only")
}
