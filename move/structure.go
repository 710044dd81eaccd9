package move

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// structure is the DDL of what moves, taken from the source with pg_dump run as the owner
// and cut into the phases of a move:
//
//	preData   tables (no indexes nor constraints but CHECK and NOT NULL), sequences,
//	          types, functions, views: before the copy
//	keys      primary keys: right after the copy, before the catch-up applies changes by key
//	postData  other indexes and constraints, policies, comments on them: after the keys
//	triggers  the tables' triggers: at the cut-over, so that they never fire for the
//	          copied rows or the applied changes (the source's own did)
//
// Foreign keys are not taken from the dump: they are added NOT VALID at the cut-over (see
// foreignKey) and validated after it, for the same reason.
type structure struct {
	preData, keys, postData, triggers string
}

// dumpProgram runs a client program as the owner. The conninfo holds no password (node
// conninfos never do); the password, if one is needed, comes from the worker's environment
// (PGPASSFILE or ~/.pgpass), as for the worker's own sessions.
type dumpProgram struct {
	dsn     string // the source's conninfo, with the owner as user
	appName string // the attempt's application_name, by which its backends are found
	dir     string // scratch directory
}

func (d dumpProgram) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path, err := pgcluster.ClientProgram(name)
	if err != nil {
		return nil, taskerr.Permanent(err)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	// Stopped (the attempt cancelled or ended), pg_dump and pg_restore are asked to stop
	// rather than killed: on SIGTERM they cancel their query on the server before they exit.
	// Killed, they left their backend behind, still queued for a lock the dump waited on.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "PGAPPNAME="+d.appName, "PGCONNECT_TIMEOUT=15")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(nodeconn.Redact(stderr.String()))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return stdout.Bytes(), nil
}

// dumpStructure dumps the schema (or the tables) in the two sections and cuts them into phases.
func dumpStructure(ctx context.Context, d dumpProgram, pl *plan, p Payload) (*structure, error) {
	selection := []string{"--strict-names"}
	if p.Schema != "" {
		selection = append(selection, "--schema="+pgx.Identifier{p.Schema}.Sanitize())
	} else {
		// Partitions too: --table names only the tables it matches.
		for _, r := range pl.tables {
			selection = append(selection, "--table="+r.ident())
		}
	}
	files := map[string]string{}
	for _, section := range []string{"pre-data", "post-data"} {
		file := filepath.Join(d.dir, section+".dump")
		args := append([]string{"--schema-only", "--section=" + section, "--format=custom", "--no-owner",
			"--no-security-labels", "--no-publications", "--no-subscriptions", "--no-tablespaces",
			"--file=" + file, "--dbname=" + d.dsn}, selection...)
		if _, err := d.run(ctx, "pg_dump", args...); err != nil {
			return nil, err
		}
		files[section] = file
	}
	s := &structure{}
	pre, err := d.run(ctx, "pg_restore", "--file=-", files["pre-data"])
	if err != nil {
		return nil, err
	}
	s.preData = string(pre)
	toc, err := d.run(ctx, "pg_restore", "--list", files["post-data"])
	if err != nil {
		return nil, err
	}
	var keys, post, triggers []string
	for _, e := range parseTOC(toc) {
		switch {
		case e.typ == "CONSTRAINT" && slices.Contains(pl.pkOIDs, e.oid):
			keys = append(keys, e.line)
		case e.typ == "FK CONSTRAINT":
			// added by the cut-over, NOT VALID
		case e.typ == "TRIGGER" && slices.Contains(pl.triggers, e.oid):
			triggers = append(triggers, e.line)
		default:
			post = append(post, e.line)
		}
	}
	for _, phase := range []struct {
		lines []string
		into  *string
	}{{keys, &s.keys}, {post, &s.postData}, {triggers, &s.triggers}} {
		if len(phase.lines) == 0 {
			continue
		}
		list := filepath.Join(d.dir, "phase.list")
		if err := os.WriteFile(list, []byte(strings.Join(phase.lines, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		sql, err := d.run(ctx, "pg_restore", "--file=-", "--use-list="+list, files["post-data"])
		if err != nil {
			return nil, err
		}
		*phase.into = string(sql)
	}
	return s, nil
}

// tocEntry is a line of `pg_restore --list`: "dumpId; tableoid oid TYPE schema name owner".
type tocEntry struct {
	line string
	oid  uint32
	typ  string
}

var tocLine = regexp.MustCompile(`^\d+; \d+ (\d+) (.*)$`)

// tocTypes are the entry types of the post-data section whose placement matters, longest
// first (a type may be several words).
var tocTypes = []string{"FK CONSTRAINT", "INDEX ATTACH", "CONSTRAINT", "TRIGGER", "INDEX"}

func parseTOC(out []byte) []tocEntry {
	var entries []tocEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		m := tocLine.FindStringSubmatch(line)
		if m == nil {
			continue // comments and blank lines
		}
		oid, _ := strconv.ParseUint(m[1], 10, 32)
		e := tocEntry{line: line, oid: uint32(oid)}
		for _, t := range tocTypes {
			if strings.HasPrefix(m[2], t+" ") {
				e.typ = t
				break
			}
		}
		entries = append(entries, e)
	}
	return entries
}

// psqlOnly matches the psql meta-commands pg_restore writes around a script (\restrict and
// \unrestrict, which keep psql from running meta-commands hidden in the dump): a server
// reading the script directly runs no meta-command anyway.
var psqlOnly = regexp.MustCompile(`(?m)^\\(un)?restrict [A-Za-z0-9]*$`)

// execScript runs DDL that pg_restore wrote, in one implicit transaction (the simple query
// protocol runs a multi-statement string as one): all of it or nothing. The script sets
// session settings (search_path among them), so conn must be a session of its own.
func execScript(ctx context.Context, conn *pgx.Conn, script string) error {
	script = psqlOnly.ReplaceAllString(script, "")
	if strings.TrimSpace(script) == "" {
		return nil
	}
	_, err := conn.PgConn().Exec(ctx, script).ReadAll()
	return err
}
