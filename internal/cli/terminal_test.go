package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// A submitter writes text that the CLI shows to others, an admin listing every role's jobs
// first: the job's description (from psql, unchecked by any client) and the errors its tasks
// raise on their nodes. Control characters in it must not reach the admin's terminal as
// such: an escape sequence there rewrites what the screen shows, sets the title, writes the
// clipboard. Every command shows them escaped, in tables, details and JSON alike.
func TestAttackTerminalEscapesInJobText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	mallory := e.Role("mallory")
	e.Exec("postgres", `GRANT deckhand_submitter TO `+pgx.Identifier{mallory}.Sanitize())
	c, err := pgx.Connect(context.Background(), e.Cluster.DSN(e.DB, mallory))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const desc = "nightly\x1b[2K\r\x1b[32mall jobs finished\x1b[0m\x1b]0;owned\x07\u009b2J \u202edehsinif\u2066 ok\u2069"
	var id string
	if err := c.QueryRow(context.Background(), `SELECT deckhand.submit(jsonb_build_object(
		'description', $1::text,
		'tasks', jsonb_build_array(jsonb_build_object('name', 'a', 'node', 'n1', 'max_attempts', 1,
			'sql', $2::text))))::text`,
		desc,
		`DO $$ BEGIN RAISE EXCEPTION E'boom\x1b[2J\x1b]52;c;ZWNobyBvd25lZA==\x07'; END $$`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.worker()
	want(t, e.run("job", "wait", id), 1)
	// JSON shows them escaped as JSON does: a program reads the text as it was written.
	if jobs := decode[[]deckhandtype.Job](t, e.run("job", "list", "-o", "json")); len(jobs) != 1 || jobs[0].Description != desc {
		t.Errorf("job list -o json: %+v, want the description %q", jobs, desc)
	}
	for _, args := range [][]string{
		{"job", "list"}, {"job", "show", id}, {"job", "wait", id},
		{"job", "list", "-o", "json"}, {"job", "show", id, "-o", "json"},
	} {
		r := e.run(args...)
		for _, out := range []string{r.stdout, r.stderr} {
			if strings.ContainsAny(out, "\x1b\x07\r\u009b\u202e\u2066\u2069") {
				t.Errorf("deckhand %s printed a control character: %q", strings.Join(args, " "), out)
			}
		}
		if args[1] == "show" && !strings.Contains(r.stdout, "boom") {
			t.Errorf("deckhand %s: the task's error is not shown: %s", strings.Join(args, " "), r)
		}
	}
}
