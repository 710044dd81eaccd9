package nodeconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ApplicationName identifies a task attempt's backend in pg_stat_activity, so the leader can
// find and terminate it if the worker running it dies.
func ApplicationName(taskID, token int64) string {
	return "deckhand task " + strconv.FormatInt(taskID, 10) + "/" + strconv.FormatInt(token, 10)
}

// terminateSQL ends the owner's backends that carry the attempt's application_name. It runs
// in an owner session fresh from OwnerConn, with the search_path SafeSearchPath, and names
// every function with its schema and argument types.
const terminateSQL = `
	SELECT pg_catalog.count(*) FILTER (WHERE NOT pg_catalog.pg_terminate_backend(a.pid, 5000::pg_catalog.int8))
	FROM pg_catalog.pg_stat_activity a
	WHERE a.application_name = $1::pg_catalog.text AND a.usename = SESSION_USER`

// TerminateAttempt ends the backend of a task attempt on its node, if it still runs, and
// waits until it is gone: from then on the attempt can neither commit nor record a
// transaction that could. It connects as the task's owner, who may always signal its own
// backends, through OwnerConn: when the submitter may not act as the owner the attempt can
// never have run, and the error wraps ErrRefused.
func TerminateAttempt(ctx context.Context, pools *Pools, o Owner, taskID, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if err != nil {
		return err
	}
	defer Release(ctx, conn)
	var stillThere int
	if err := conn.QueryRow(ctx, terminateSQL, ApplicationName(taskID, token)).Scan(&stillThere); err != nil {
		return err
	}
	if stillThere > 0 {
		return fmt.Errorf("backend of task %d still running after terminate", taskID)
	}
	return nil
}

// What pg_xact_status says of a node transaction; "" when the node no longer knows (an id
// older than its oldest kept commit status).
const (
	XactCommitted  = "committed"
	XactAborted    = "aborted"
	XactInProgress = "in progress"
	// XactFuture: the server, a primary, has not yet given out the id. No server that ran
	// the transaction says that of it: the one the conninfo reaches now is another (a standby
	// promoted before the transaction reached it, a restored backup), and the transaction
	// did not commit there.
	XactFuture = "future"
)

// Xact is an attempt's node transaction as recorded before it commits: its id, and what
// identifies the history of the server that gave it out. A transaction id names a
// transaction only within one history: a standby promoted in a failover continues its
// primary's history up to the point it had replayed, starts a timeline of its own there, and
// may give out again the ids the old primary gave out after that point.
type Xact struct {
	XID string // xid8, as text
	// Timeline is the server's timeline when the id was read; 0 when not recorded (an
	// attempt recorded before timelines were).
	Timeline int64
	// SystemID is the server's system identifier (shared by a primary and its physical
	// standbys, another for any other cluster); nil when the role could not read it.
	SystemID *int64
}

// XactColumn names the column of XactSQL's result, so that the executor can tell its own
// statement's result from those of the task's SQL.
const XactColumn = "deckhand_attempt_xid"

// XactSQL reads, in the task's own transaction and in the task's statement's round trip, the
// transaction's id and, when it has one, the server's timeline and system identifier, as one
// text value: "xid timeline sysid" (timeline as 8 hex digits, sysid empty when the role may
// not read it), NULL when the transaction wrote nothing. It runs in the owner's session after
// the task's SQL: every function and operator is named in pg_catalog, with exact types. A
// transaction with an id runs on a primary, where pg_walfile_name may be called; the system
// identifier is read only where the role may execute pg_control_system (PUBLIC by default),
// so that a server that revoked it fails no task. A session that knows its server's history
// already (queueServerHistory) reads the id alone (xidSQL): see AttemptXactSQL.
const XactSQL = `SELECT CASE WHEN x.id IS NOT NULL THEN x.id
	OPERATOR(pg_catalog.||) ' '::pg_catalog.text
	OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1::pg_catalog.int4, 8::pg_catalog.int4)
	OPERATOR(pg_catalog.||) ' '::pg_catalog.text
	OPERATOR(pg_catalog.||) COALESCE(CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()'::pg_catalog.text, 'EXECUTE'::pg_catalog.text)
		THEN (pg_catalog.pg_control_system()).system_identifier::pg_catalog.text END, ''::pg_catalog.text) END AS ` + XactColumn + `
	FROM (SELECT pg_catalog.pg_current_xact_id_if_assigned()::pg_catalog.text) AS x(id)`

// xidSQL reads the transaction's id alone, in a session whose server's history is known.
const xidSQL = "SELECT pg_catalog.pg_current_xact_id_if_assigned()::pg_catalog.text AS " + XactColumn

// serverHistorySQL reads the server's timeline (NULL on a standby) and system identifier
// (NULL where the role may not read it), as XactSQL does.
const serverHistorySQL = `
	SELECT CASE WHEN NOT pg_catalog.pg_is_in_recovery()
			THEN pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1::pg_catalog.int4, 8::pg_catalog.int4) END,
		CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()'::pg_catalog.text, 'EXECUTE'::pg_catalog.text)
			THEN (pg_catalog.pg_control_system()).system_identifier END`

// serverHistoryKey holds, in a session's custom data, its server's history (a serverHistory)
// once read: a primary's timeline cannot change while the session lasts (a server changes
// timeline only when it leaves recovery, and a primary enters recovery only through a
// restart, which ends the session), nor can a server's system identifier. A session on a
// standby holds nil: the standby may be promoted while the session lasts, so its transactions
// read the history with their id (XactSQL).
const serverHistoryKey = "deckhand.history"

type serverHistory struct {
	timeline int64
	systemID *int64
}

// queueServerHistory queues the read of the session's server's history into b, unless the
// session has read it already; the session keeps it in its custom data.
func queueServerHistory(b *pgx.Batch, conn *pgx.Conn) {
	data := conn.PgConn().CustomData()
	if _, known := data[serverHistoryKey]; known {
		return
	}
	b.Queue(serverHistorySQL).QueryRow(func(row pgx.Row) error {
		var (
			timeline *string
			h        serverHistory
		)
		if err := row.Scan(&timeline, &h.systemID); err != nil {
			return err
		}
		if timeline == nil {
			data[serverHistoryKey] = (*serverHistory)(nil)
			return nil
		}
		tl, err := strconv.ParseUint(*timeline, 16, 32)
		if err != nil {
			return fmt.Errorf("the node's timeline %q: %w", *timeline, err)
		}
		h.timeline = int64(tl)
		data[serverHistoryKey] = &h
		return nil
	})
}

// knownHistory is the history of conn's server, nil when it is not known (a standby's).
func knownHistory(conn *pgx.Conn) *serverHistory {
	h, _ := conn.PgConn().CustomData()[serverHistoryKey].(*serverHistory)
	return h
}

// AttemptXactSQL is the statement that follows a transactional task's SQL in conn, a session
// from TaskSession: xidSQL when the session knows its server's history, XactSQL otherwise.
// ReadAttemptXact reads its value.
func AttemptXactSQL(conn *pgx.Conn) string {
	if knownHistory(conn) != nil {
		return xidSQL
	}
	return XactSQL
}

// ReadAttemptXact reads the value of AttemptXactSQL(conn), run in conn: ok false when it is
// not one.
func ReadAttemptXact(conn *pgx.Conn, v string) (Xact, bool) {
	h := knownHistory(conn)
	if h == nil {
		return ParseXact(v)
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return Xact{}, false
	}
	return Xact{XID: v, Timeline: h.timeline, SystemID: h.systemID}, true
}

// ParseXact reads XactSQL's value: ok false when it is not one.
func ParseXact(v string) (x Xact, ok bool) {
	f := strings.Split(v, " ")
	if len(f) != 3 || f[0] == "" {
		return Xact{}, false
	}
	if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
		return Xact{}, false
	}
	tl, err := strconv.ParseUint(f[1], 16, 32)
	if err != nil || len(f[1]) != 8 {
		return Xact{}, false
	}
	x = Xact{XID: f[0], Timeline: int64(tl)}
	if f[2] != "" {
		id, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return Xact{}, false
		}
		x.SystemID = &id
	}
	return x, true
}

// XactAnswer is what a node says of a transaction id, and of itself at that moment.
type XactAnswer struct {
	Status  string // XactCommitted, ...; "" when the node no longer knows
	Standby bool   // the server is in recovery
	// Timeline is the server's timeline (a primary's; 0 on a standby, which cannot say it
	// to an unprivileged role).
	Timeline int64
	SystemID *int64 // nil when the role may not read it
}

// XactStatus asks o's node what became of transaction xid: for an attempt whose COMMIT was
// sent but whose answer never came (the connection broke), or whose worker died.
func XactStatus(ctx context.Context, pools *Pools, o Owner, xid string) (XactAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pools.OwnerConn(ctx, o)
	if Refused(err) {
		// The submitter may no longer act as the owner there (a membership revoked since
		// the attempt ran), and never will again: asking as the owner would be refused for
		// ever. What became of a transaction is no secret of the owner's (pg_xact_status
		// needs no privilege): ask as the user the node's conninfo names, as Probe does.
		pool, perr := pools.get(ctx, o.DSN, "")
		if perr != nil {
			return XactAnswer{}, perr
		}
		pc, perr := pool.Acquire(ctx)
		if perr != nil {
			return XactAnswer{}, perr
		}
		defer Release(ctx, pc)
		return xactStatus(ctx, pc.Conn(), xid)
	}
	if err != nil {
		return XactAnswer{}, err
	}
	defer Release(ctx, conn)
	return xactStatus(ctx, conn.Conn(), xid)
}

// xactStatusSQL asks a transaction's status and, in the same statement, the server's
// timeline (on a primary) and system identifier. A server leaves recovery but never enters
// it again, so a timeline read once pg_is_in_recovery said false is the primary's.
const xactStatusSQL = `
	SELECT pg_catalog.pg_xact_status($1::pg_catalog.text::pg_catalog.xid8),
		pg_catalog.pg_is_in_recovery(),
		CASE WHEN NOT pg_catalog.pg_is_in_recovery()
			THEN pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1::pg_catalog.int4, 8::pg_catalog.int4) END,
		CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()'::pg_catalog.text, 'EXECUTE'::pg_catalog.text)
			THEN (pg_catalog.pg_control_system()).system_identifier END`

// serverSQL says whether the server is in recovery, and its system identifier.
const serverSQL = `
	SELECT pg_catalog.pg_is_in_recovery(),
		CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()'::pg_catalog.text, 'EXECUTE'::pg_catalog.text)
			THEN (pg_catalog.pg_control_system()).system_identifier END`

func xactStatus(ctx context.Context, conn *pgx.Conn, xid string) (XactAnswer, error) {
	var (
		status, timeline *string
		a                XactAnswer
	)
	err := conn.QueryRow(ctx, xactStatusSQL, xid).Scan(&status, &a.Standby, &timeline, &a.SystemID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22023" {
		// "transaction ID ... is in the future", the only invalid_parameter_value that
		// pg_xact_status raises for a well-formed id; its words depend on lc_messages. Only a
		// primary's word is final: a standby that has not replayed as far as the id says the
		// same of a transaction its primary committed, and is asked again later.
		a = XactAnswer{Status: XactFuture}
		if rerr := conn.QueryRow(ctx, serverSQL).Scan(&a.Standby, &a.SystemID); rerr != nil || a.Standby {
			return XactAnswer{}, err
		}
		return a, nil
	}
	if err != nil {
		return XactAnswer{}, err
	}
	if timeline != nil {
		tl, perr := strconv.ParseUint(*timeline, 16, 32)
		if perr != nil {
			return XactAnswer{}, fmt.Errorf("the node's timeline %q: %w", *timeline, perr)
		}
		a.Timeline = int64(tl)
	}
	if status != nil {
		a.Status = *status
	}
	return a, nil
}

// Probe reports a node's role (primary or standby) and its WAL position: the replay position
// on a standby, the current write position on a primary. It connects as the user the node's
// conninfo names, not as any task's owner.
func Probe(ctx context.Context, pools *Pools, dsn string) (role, lsn string, err error) {
	pool, err := pools.get(ctx, dsn, "")
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var standby bool
	err = pool.QueryRow(ctx, `
		SELECT pg_catalog.pg_is_in_recovery(),
			coalesce(CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
			              ELSE pg_catalog.pg_current_wal_lsn() END::pg_catalog.text, '')`,
	).Scan(&standby, &lsn)
	if err != nil {
		return "", "", err
	}
	if standby {
		return "standby", lsn, nil
	}
	return "primary", lsn, nil
}

// heldSQL reports, by position, which of the names ($1 schemas, $2 relations, empty for a
// whole schema) the database holds. Everything is schema-qualified: the session's search_path is
// SafeSearchPath already, but nothing here should depend on it.
const heldSQL = `
	SELECT n.ord::pg_catalog.int4
	FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) WITH ORDINALITY AS n(s, r, ord)
	WHERE CASE WHEN n.r OPERATOR(pg_catalog.=) '' THEN EXISTS (
	          SELECT 1 FROM pg_catalog.pg_namespace ns WHERE ns.nspname OPERATOR(pg_catalog.=) n.s)
	      ELSE EXISTS (
	          SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid OPERATOR(pg_catalog.=) c.relnamespace
	          WHERE ns.nspname OPERATOR(pg_catalog.=) n.s AND c.relname OPERATOR(pg_catalog.=) n.r
	            AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,m,f}'::pg_catalog."char"[])) END
	ORDER BY n.ord`

// Held reports which of names a node's database holds: a name of one part is a schema, of two
// a table (or a view, a materialized view, a foreign table) of a schema. Like Probe it
// connects as the user the node's conninfo names, not as any task's owner: the answer must
// not depend on whether an owner may log in there (a move's check that no other group holds
// the name it places would otherwise pass for an owner the node does not know). It reads
// names from pg_catalog and nothing else.
func Held(ctx context.Context, pools *Pools, dsn string, names []pgx.Identifier) ([]pgx.Identifier, error) {
	schemas, rels := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		switch len(n) {
		case 1:
			schemas[i] = n[0]
		case 2:
			schemas[i], rels[i] = n[0], n[1]
		default:
			return nil, fmt.Errorf("held: %q is not a schema or a schema-qualified name", n.Sanitize())
		}
	}
	pool, err := pools.get(ctx, dsn, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, _ := pool.Query(ctx, heldSQL, schemas, rels)
	found, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make([]pgx.Identifier, 0, len(found))
	for _, i := range found {
		out = append(out, names[i-1])
	}
	return out, nil
}

// Outcome is what an answer of XactStatus establishes about a recorded transaction.
type Outcome int

const (
	// Committed: the transaction committed, in the history of the server asked now.
	Committed Outcome = iota
	// NotCommitted: the transaction's effect is not in the server's history (it aborted, or
	// the server never gave out its id): running the task again applies it once.
	NotCommitted
	// InProgress: the transaction still runs (its backend has not noticed that its client
	// is gone): ask again later.
	InProgress
	// Unknown: the answer does not say what became of the transaction (the server is not
	// the one, or no longer on the history, that gave out the id; or it no longer keeps the
	// commit status of ids that old): running the task again could apply its effect twice,
	// and recording it done could lose it.
	Unknown
)

// Judge says what answer a establishes about the recorded transaction x, and for Unknown why,
// as words that follow "its effect is unknown because". No answer of a server with another
// system identifier than the recorded one is trusted. An id that a primary of the same
// system never gave out is NotCommitted, on any timeline: no transaction of that id is in
// its history, so the attempt's effect is not there. Any other answer is trusted only from
// a primary on the timeline that the id was recorded with: a server promoted since (a
// failover, a restored backup) shares the recorded history only up to its switch point,
// which an unprivileged role cannot read, and after which it may have given out the same id
// to another transaction. Transactions recorded without a timeline (before timelines were
// recorded) are judged on the status alone, as they were; a status the server no longer
// keeps is Unknown for every transaction.
func Judge(x Xact, node string, a XactAnswer) (Outcome, string) {
	if x.SystemID != nil && a.SystemID != nil && *x.SystemID != *a.SystemID {
		// Not a server of the history the id came from at all (the node's conninfo or
		// name was pointed at another cluster): whatever it says of the id, the server
		// that ran the attempt may hold its effect.
		return Unknown, fmt.Sprintf("node %s is another server now than the one that gave out transaction %s, between the attempt and the check "+
			"(system identifier %d, %d then)", node, x.XID, *a.SystemID, *x.SystemID)
	}
	if a.Status == XactFuture {
		return NotCommitted, ""
	}
	if x.Timeline != 0 {
		switch {
		case a.Standby:
			return Unknown, fmt.Sprintf("node %s answers as a standby now, not as the primary (timeline %d) that gave out transaction %s: "+
				"it failed over or is another server, between the attempt and the check", node, x.Timeline, x.XID)
		case a.Timeline != x.Timeline:
			return Unknown, fmt.Sprintf("node %s failed over between the attempt and the check (timeline %d when the attempt ran, %d now), "+
				"and transaction %s may name another transaction there", node, x.Timeline, a.Timeline, x.XID)
		}
	}
	switch a.Status {
	case XactCommitted:
		return Committed, ""
	case XactAborted:
		return NotCommitted, ""
	case XactInProgress:
		return InProgress, ""
	case "":
		return Unknown, fmt.Sprintf("node %s no longer keeps the commit status of transaction %s (older than its oldest)", node, x.XID)
	default:
		return Unknown, fmt.Sprintf("node %s reports transaction %s as %q", node, x.XID, a.Status)
	}
}
