package nodeconn

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// progressViews are the pg_stat_progress_* views, each read as (pid, command, phase, done,
// total, unit), with the PostgreSQL major version that has it. Done and total are those of the
// phase: blocks while a table is scanned, tuples while an index is loaded, bytes of a COPY.
var progressViews = []struct {
	since int
	sql   string
}{
	{12, `SELECT pid, 'CREATE INDEX'::pg_catalog.text, phase,
		CASE WHEN tuples_total > 0 THEN tuples_done ELSE blocks_done END,
		CASE WHEN tuples_total > 0 THEN tuples_total ELSE blocks_total END,
		CASE WHEN tuples_total > 0 THEN 'tuples' ELSE 'blocks' END
		FROM pg_catalog.pg_stat_progress_create_index`},
	{12, `SELECT pid, 'VACUUM', phase,
		CASE WHEN phase = 'vacuuming heap' THEN heap_blks_vacuumed ELSE heap_blks_scanned END, heap_blks_total, 'blocks'
		FROM pg_catalog.pg_stat_progress_vacuum`},
	{13, `SELECT pid, 'ANALYZE', phase, sample_blks_scanned, sample_blks_total, 'blocks'
		FROM pg_catalog.pg_stat_progress_analyze`},
	{12, `SELECT pid, command, phase, heap_blks_scanned, heap_blks_total, 'blocks'
		FROM pg_catalog.pg_stat_progress_cluster`},
	{14, `SELECT pid, 'COPY', command OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) type,
		CASE WHEN bytes_total > 0 THEN bytes_processed ELSE tuples_processed END, bytes_total,
		CASE WHEN bytes_total > 0 THEN 'bytes' ELSE 'tuples' END
		FROM pg_catalog.pg_stat_progress_copy`},
	{13, `SELECT pid, 'BASE_BACKUP', phase, backup_streamed, coalesce(backup_total, 0), 'bytes'
		FROM pg_catalog.pg_stat_progress_basebackup`},
}

// progressSQL reads, for the session user's backends whose application_name is one of $1,
// the progress PostgreSQL reports. It runs in an owner session (search_path SafeSearchPath):
// PostgreSQL shows a role the progress of its own backends only, which is all it needs.
func progressSQL(major int) string {
	var parts []string
	for _, v := range progressViews {
		if major >= v.since {
			parts = append(parts, v.sql)
		}
	}
	return `SELECT a.application_name, p.command, coalesce(p.phase, ''), coalesce(p.done, 0), coalesce(p.total, 0), p.unit
		FROM pg_catalog.pg_stat_activity a
		JOIN (` + strings.Join(parts, "\n UNION ALL ") + `) AS p(pid, command, phase, done, total, unit) ON p.pid = a.pid
		WHERE a.application_name = ANY ($1::pg_catalog.text[]) AND a.usename = SESSION_USER`
}

// ReadProgress reads on o's node the progress of the attempts whose application names (see
// ApplicationName) are given, in a session as o.Role reached through OwnerConn. The result is
// keyed by application name; attempts whose backend runs nothing that reports progress are
// absent.
func ReadProgress(ctx context.Context, pools *Pools, o Owner, appNames []string) (map[string]deckhandtype.TaskProgress, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if err != nil {
		return nil, err
	}
	defer Release(ctx, conn)
	major := serverMajor(conn.Conn())
	rows, _ := conn.Query(ctx, progressSQL(major), appNames)
	out := map[string]deckhandtype.TaskProgress{}
	now := time.Now()
	var app string
	var p deckhandtype.TaskProgress
	_, err = pgx.ForEachRow(rows, []any{&app, &p.Command, &p.Phase, &p.Done, &p.Total, &p.Unit}, func() error {
		p.SampledAt = now
		out[app] = p
		return nil
	})
	return out, err
}

// serverMajor is the node's PostgreSQL major version, as it announced it (12 when unknown).
func serverMajor(conn *pgx.Conn) int {
	v := conn.PgConn().ParameterStatus("server_version")
	major, err := strconv.Atoi(strings.SplitN(strings.TrimSpace(v), ".", 2)[0])
	if err != nil {
		return 12
	}
	return major
}
