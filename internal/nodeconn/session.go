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
// for an attempt of t: the job's settings, the statement timeout and the attempt's
// application_name (by which the leader finds and terminates the backend should the worker
// die). Its search_path stays SafeSearchPath, for the built-in kinds' own SQL: names the job
// gives are resolved with ResolveNames. release leaves nothing of the task in the pooled
// session.
func (p *Pools) Session(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask) (conn *pgx.Conn, release func(), err error) {
	return p.session(ctx, o, t, false)
}

// TaskSession is Session for a task's own SQL: the job's search_path (PostgreSQL's default
// when it captured none) is applied last, after deckhand's own statements.
func (p *Pools) TaskSession(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask) (conn *pgx.Conn, release func(), err error) {
	return p.session(ctx, o, t, true)
}

// session is Session; withSearchPath applies the job's search_path last, for a task whose SQL
// is the user's: nothing deckhand runs in the session comes after it.
func (p *Pools) session(ctx context.Context, o Owner, t *deckhandtype.ClaimedTask, withSearchPath bool) (*pgx.Conn, func(), error) {
	pooled, err := p.OwnerConn(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	release := func() { Release(ctx, pooled) }
	if err := prepare(ctx, pooled.Conn(), t, withSearchPath); err != nil {
		release()
		return nil, nil, err
	}
	return pooled.Conn(), release, nil
}

// prepare applies the job's settings, then deckhand's own, in one statement whose every
// function is pg_catalog's by name and argument types.
func prepare(ctx context.Context, conn *pgx.Conn, t *deckhandtype.ClaimedTask, withSearchPath bool) error {
	var names, values []string
	for _, k := range slices.Sorted(maps.Keys(t.Settings)) {
		// Refused at submission; a row written some other way is refused here.
		if spec.ReservedSetting(k) {
			return taskerr.Permanent(fmt.Errorf("setting %q is not one a job may choose", k))
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

	var q strings.Builder
	args := make([]any, 0, 2*len(names))
	q.WriteString("SELECT ")
	for i := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "pg_catalog.set_config($%d::pg_catalog.text, $%d::pg_catalog.text, false)", 2*i+1, 2*i+2)
		args = append(args, names[i], values[i])
	}
	_, err := conn.Exec(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("prepare the session: %w", err)
	}
	return nil
}
