package pgtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestSharedDatabaseAndRole(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	c := pgtest.Shared(t)
	role := `Role "With" Space` // quoting must survive odd names
	if err := pgtest.CreateLoginRole(ctx, c, role, ""); err != nil {
		t.Fatal(err)
	}
	// Registered before NewDatabase so that it runs after the database (holding the role's
	// grants) is dropped.
	t.Cleanup(func() {
		if err := c.Exec(context.Background(), "postgres", "DROP ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Error(err)
		}
	})
	db := pgtest.NewDatabase(t)
	if err := c.Exec(ctx, db, "CREATE TABLE t (v int); GRANT ALL ON t TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	conn := pgtest.Connect(t, c.DSN(db, role))
	var who, dbname string
	if err := conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&who, &dbname); err != nil {
		t.Fatal(err)
	}
	if who != role || dbname != db {
		t.Fatalf("connected as %q to %q, want %q to %q", who, dbname, role, db)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", 42); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("got %d, %v", v, err)
	}

	// Only the pgpass line lets the role in: the shared cluster asks every role but the
	// superuser for its password.
	nopass := role + " without password"
	if err := c.CreateRole(ctx, nopass, "LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Exec(context.Background(), "postgres", "DROP ROLE "+pgx.Identifier{nopass}.Sanitize()) }) //nolint:errcheck
	if conn, err := pgx.Connect(ctx, c.DSN(db, nopass)); err == nil {
		conn.Close(ctx)
		t.Fatal("a role without a password logged in to the shared cluster")
	}

	var fsync, walLevel, maxConn string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('wal_level'), current_setting('max_connections')").Scan(&fsync, &walLevel, &maxConn); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" || walLevel != "replica" || maxConn != "300" {
		t.Fatalf("fsync=%s wal_level=%s max_connections=%s", fsync, walLevel, maxConn)
	}
	if !strings.HasPrefix(c.DSN(db, "postgres"), "host=127.0.0.1 port=") {
		t.Fatalf("DSN %q", c.DSN(db, "postgres"))
	}
}

// pgCode extracts the SQLSTATE of a server error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
