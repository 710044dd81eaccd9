package nodeconn

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
)

// DefaultSearchPath is PostgreSQL's own default, which a task's SQL gets when its job captured
// no search_path: node sessions themselves start with SafeSearchPath.
const DefaultSearchPath = `"$user", public`

// Session connects to o's node as the task's owner through OwnerConn and prepares the session
// for an attempt of t, in the same round trip: the job's settings, the statement timeout and
// the attempt's application_name (by which the leader finds and terminates the backend should
// the worker die). Its search_path stays SafeSearchPath, for the built-in kinds' own SQL: names
// the job gives are resolved with ResolveNames. release hands the session back.
func (p *Pools) Session(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask) (conn *pgx.Conn, release func(), err error) {
	return p.session(ctx, o, t, sessionSetup{})
}

// TaskSession is Session for a task's own SQL: the job's search_path (PostgreSQL's default
// when it captured none) comes last, after deckhand's own statements, and a transactional task
// gets its transaction opened, with its settings local to it.
func (p *Pools) TaskSession(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask) (conn *pgx.Conn, release func(), err error) {
	return p.session(ctx, o, t, sessionSetup{searchPath: true, begin: t.InTransaction})
}

// sessionSetup says how an attempt's session is prepared.
type sessionSetup struct {
	searchPath bool // apply the job's search_path, last: the user's SQL follows
	begin      bool // open the task's transaction; its settings are local to it
}

func (p *Pools) session(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask, s sessionSetup) (*pgx.Conn, func(), error) {
	names, values, err := settings(t, s.searchPath)
	if err != nil {
		return nil, nil, err
	}
	pooled, err := p.acquire(ctx, o, s.queue(names, values))
	if err != nil {
		return nil, nil, err
	}
	return pooled.Conn(), func() { Release(ctx, pooled) }, nil
}

// queue returns what queues the set-up's statements, with the settings names and values.
func (s sessionSetup) queue(names, values []string) func(*pgx.Batch, *pgx.Conn) {
	return func(b *pgx.Batch, conn *pgx.Conn) {
		if s.begin {
			// A transaction that writes records its id with what identifies the server's
			// history (see XactSQL); the session's first transaction reads it once for all.
			queueServerHistory(b, conn)
			b.Queue("BEGIN")
		}
		b.Queue(setConfigSQL(len(names), s.begin), setConfigArgs(names, values)...)
	}
}

// settings are the job's settings, then deckhand's own, in the order they are applied.
func settings(t *deckhandtype.ClaimedTask, withSearchPath bool) (names, values []string, err error) {
	for _, k := range slices.Sorted(maps.Keys(t.Settings)) {
		// Refused at submission; a row written some other way is refused here.
		if spec.ReservedSetting(k) {
			return nil, nil, taskerr.Permanent(fmt.Errorf("setting %q is not one a job may choose", k))
		}
		names, values = append(names, k), append(values, t.Settings[k])
	}
	if withSearchPath {
		path := t.SearchPath
		if strings.TrimSpace(path) == "" {
			path = DefaultSearchPath
		}
		names, values = append(names, "search_path"), append(values, path)
	}
	names = append(names, "statement_timeout", "application_name")
	values = append(values, strconv.FormatInt(max(t.TimeoutMS, 1), 10), ApplicationName(t.ID, t.Token))
	return names, values, nil
}

// setConfigSQL applies n settings in one statement whose every function is pg_catalog's by
// name and argument types; local ones last until the end of the transaction.
func setConfigSQL(n int, local bool) string {
	var q strings.Builder
	q.WriteString("SELECT ")
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_catalog.set_config($%d::pg_catalog.text, $%d::pg_catalog.text, %t)", 2*i+1, 2*i+2, local)
	}
	return q.String()
}

func setConfigArgs(names, values []string) []any {
	args := make([]any, 0, 2*len(names))
	for i := range names {
		args = append(args, names[i], values[i])
	}
	return args
}
