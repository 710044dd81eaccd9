package nodeconn_test

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// database makes a database of the test's own on the shared server, and a short suffix for the
// names of its roles (which are the server's, and stop at 63 bytes).
func database(t *testing.T) (context.Context, *pgcluster.Cluster, string, string) {
	ctx := pgtest.Context(t, 2*time.Minute)
	c := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	h := fnv.New32a()
	h.Write([]byte(db))
	return ctx, c, db, strconv.FormatUint(uint64(h.Sum32()), 36)
}

// readAll keeps every result, rows and all.
func readAll(mrr *pgconn.MultiResultReader) ([]*pgconn.Result, error) { return mrr.ReadAll() }

// A transactional task's SQL runs, once its session has read its server's history, in the
// round trip of the owner's check and the set-up. Names and values written by whoever can
// write catalog rows (roles with quotes and backslashes, settings that try to end their
// literal) arrive as they were written, and a submitter who is not a member of the owner (any
// more), or no role at all, is refused before any of the task's SQL runs.
func TestTaskTransactionChecksTheOwnerInTheSameRoundTrip(t *testing.T) {
	ctx, c, db, suffix := database(t)
	owner, submitter := `tt_o'w\ner_`+suffix, `tt_s'u\b_`+suffix
	if err := pgtest.CreateLoginRole(ctx, c, owner, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateRole(ctx, submitter, "NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	qo, qs := pgx.Identifier{owner}.Sanitize(), pgx.Identifier{submitter}.Sanitize()
	t.Cleanup(func() {
		_ = c.Exec(context.Background(), db, "DROP OWNED BY "+qo)
		_ = c.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+qo+"; DROP ROLE IF EXISTS "+qs)
	})
	if err := c.Exec(ctx, db, "CREATE TABLE ran (v text); GRANT INSERT, SELECT ON ran TO "+qo+"; GRANT "+qo+" TO "+qs); err != nil {
		t.Fatal(err)
	}
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	o := nodeconn.Owner{Node: "n1", DSN: c.DSN(db, owner), Role: owner, Submitter: submitter}
	hostile := `it's \' E'\\'; SELECT 1/0; -- $$ "q"` + "\n*/"
	task := &deckhandtype.ClaimedTask{ID: 7, Token: 3, InTransaction: true, TimeoutMS: 10000,
		Settings: map[string]string{"deckhand_test.v": hostile}, SearchPath: `"s'p\", public`}
	run := func(sql string) (string, error) {
		t.Helper()
		task.SQL = sql
		conn, release, results, err := pools.TaskTransaction(ctx, o, task, readAll)
		if conn == nil {
			return "", err
		}
		defer release()
		if err != nil {
			t.Fatalf("the task's SQL: %v", err)
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		// The last result is the transaction's id; the one before it the task's.
		r := results[len(results)-2]
		if len(r.Rows) != 1 {
			t.Fatalf("the task's SQL returned %d rows", len(r.Rows))
		}
		return string(r.Rows[0][0]), nil
	}
	read := `INSERT INTO public.ran VALUES ('x'); SELECT pg_catalog.concat_ws('|', current_setting('deckhand_test.v'), current_setting('search_path'),
		current_setting('application_name'), (SELECT query FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()))`
	first, err := run(read)
	if err != nil {
		t.Fatal(err)
	}
	second, err := run(read)
	if err != nil {
		t.Fatal(err)
	}
	want := hostile + `|"s'p\", public|` + nodeconn.ApplicationName(7, 3) + "|"
	for i, got := range []string{first, second} {
		if !strings.HasPrefix(got, want) {
			t.Errorf("attempt %d saw %q; want it to start with %q", i+1, got, want)
		}
	}
	// The first attempt's session had not read its server's history: it was set up in a
	// round trip of its own. The second's string carries the check, and no seed.
	if query := strings.TrimPrefix(second, want); !strings.HasPrefix(query, "SELECT CASE WHEN") || strings.Contains(query, "setseed(0") ||
		strings.HasPrefix(strings.TrimPrefix(first, want), "SELECT CASE WHEN") {
		t.Errorf("the statements the attempts ran: %q, then %q; want the check in the second's query string only", first, second)
	}

	// Refused: no longer a member, then no role at all. Nothing of the task's SQL runs.
	if err := c.Exec(ctx, db, "REVOKE "+qo+" FROM "+qs); err != nil {
		t.Fatal(err)
	}
	mark := `INSERT INTO public.ran VALUES ('refused'); SELECT 1`
	if _, err := run(mark); !nodeconn.Refused(err) || !strings.Contains(err.Error(), "is not a member of role") {
		t.Errorf("a submitter who is no longer a member: %v; want refused", err)
	}
	o.Submitter = "tt_nobody_" + suffix
	if _, err := run(mark); !nodeconn.Refused(err) || !strings.Contains(err.Error(), "is not a role on node n1") {
		t.Errorf("a submitter who is no role: %v; want refused", err)
	}
	var n int
	if err := pgtest.Connect(t, c.DSN(db, owner)).QueryRow(ctx, "SELECT count(*) FROM public.ran WHERE v = 'refused'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused tasks' SQL ran %d times (%v); want never", n, err)
	}
}

// The owner's own defaults cannot choose the encoding deckhand's literals are read in. With
// client_encoding SJIS (where a multibyte character may end in the byte of a backslash) and
// backslash_quote on, a forged submitter name could otherwise swallow the backslash that
// escapes it, end its literal, and make the check pass for anybody.
func TestTaskTransactionLiteralsIgnoreTheOwnersEncoding(t *testing.T) {
	ctx, c, db, suffix := database(t)
	owner := "tt_sjis_" + suffix
	if err := pgtest.CreateLoginRole(ctx, c, owner, ""); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, c.DSN(db, pgcluster.Superuser))
	// What the forged name's literal would read as in SJIS: two characters (the second of
	// which took the escaping backslash) and a quote. It is made a role, so that the check's
	// pg_has_role would answer (false) instead of failing on an unknown role.
	var swallowed string
	if err := admin.QueryRow(ctx, `SELECT convert_from('\xe381815c'::bytea, 'SJIS') || ''''`).Scan(&swallowed); err != nil {
		t.Fatal(err)
	}
	qo, qw := pgx.Identifier{owner}.Sanitize(), pgx.Identifier{swallowed}.Sanitize()
	t.Cleanup(func() {
		_ = c.Exec(context.Background(), db, "DROP OWNED BY "+qo)
		_ = c.Exec(context.Background(), "postgres", "DROP ROLE IF EXISTS "+qo+"; DROP ROLE IF EXISTS "+qw)
	})
	if _, err := admin.Exec(ctx, "CREATE ROLE "+qw+" NOLOGIN; CREATE TABLE ran (v text); GRANT INSERT ON ran TO "+qo+
		"; ALTER ROLE "+qo+" SET client_encoding = 'SJIS'; ALTER ROLE "+qo+" SET backslash_quote = on"); err != nil {
		t.Fatal(err)
	}
	forged := "\u3041\\'::pg_catalog.name, SESSION_USER, $$MEMBER$$) OR true THEN 0 --"
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	task := &deckhandtype.ClaimedTask{ID: 1, Token: 1, InTransaction: true, TimeoutMS: 10000}
	run := func(submitter, sql string) error {
		t.Helper()
		task.SQL = sql
		o := nodeconn.Owner{Node: "n1", DSN: c.DSN(db, owner), Role: owner, Submitter: submitter}
		conn, release, _, err := pools.TaskTransaction(ctx, o, task, readAll)
		if conn == nil {
			return err
		}
		defer release()
		if err == nil {
			_, err = conn.Exec(ctx, "COMMIT")
		}
		return err
	}
	// The owner itself first, so that the session has read its server's history.
	if err := run(owner, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := run(forged, "INSERT INTO public.ran VALUES ('forged')"); !nodeconn.Refused(err) {
		t.Errorf("a forged submitter name that ends its literal in SJIS: %v; want refused", err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM ran").Scan(&n); err != nil || n != 0 {
		t.Errorf("the forged submitter's SQL ran %d times (%v); want never", n, err)
	}
}

// A syntax error in a task's SQL, which PostgreSQL finds as it parses the whole query string
// and so before the check runs, is the task's error, worded as the node wrote it, and the
// session goes on serving tasks.
func TestTaskTransactionSyntaxErrorIsTheTasks(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	c := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	pools := nodeconn.NewPools(1)
	defer pools.Close()
	o := nodeconn.Owner{Node: "n1", DSN: c.DSN(db, pgcluster.Superuser), Role: pgcluster.Superuser, Submitter: pgcluster.Superuser}
	pids := map[uint32]bool{}
	for i, sql := range []string{"SELECT 1", "SELEC 1", "SELECT 2"} {
		task := &deckhandtype.ClaimedTask{ID: int64(i + 1), Token: 1, InTransaction: true, TimeoutMS: 10000, SQL: sql}
		conn, release, _, err := pools.TaskTransaction(ctx, o, task, readAll)
		var pgErr *pgconn.PgError
		if sql == "SELEC 1" {
			if conn == nil || !errors.As(err, &pgErr) || pgErr.Code != "42601" || strings.Contains(err.Error(), "owner") {
				t.Fatalf("a syntax error in the task's SQL: session %v, %v; want the node's syntax error, with the session", conn != nil, err)
			}
			release()
			continue
		}
		if err != nil {
			t.Fatalf("task %q: %v", sql, err)
		}
		pids[conn.PgConn().PID()] = true
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		release()
	}
	if len(pids) != 1 {
		t.Errorf("the tasks ran in %d sessions; want the one the syntax error left", len(pids))
	}
}
