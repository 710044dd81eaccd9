// Package move is the move_table feature: it moves a table to another node through logical
// replication, registering everything it creates with the cleaner first.
package move

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
)

// KindMoveTable moves a table to another node through logical replication.
const KindMoveTable = "move_table"

// The steps of a move, in order. Each registers what it is about to create first.
const (
	StepCreateTable        = "create_table"        // the table (and its schema, if missing) on the target: on_failure
	StepCreatePublication  = "create_publication"  // on the source: always
	StepCreateSlot         = "create_slot"         // logical slot on the source, exporting a snapshot: always
	StepCreateSubscription = "create_subscription" // on the target, disabled, on that slot: always
	StepCopy               = "copy"                // COPY under the slot's snapshot, then enable the subscription
	StepSwitch             = "switch"              // writes blocked, target caught up: the operation succeeds
	StepDrop               = "drop"                // subscription, publication, slot; the source table deferred
)

// MoveSteps lists the steps of a move in order.
var MoveSteps = []string{StepCreateTable, StepCreatePublication, StepCreateSlot, StepCreateSubscription, StepCopy, StepSwitch, StepDrop}

// MovePayload is the payload of a move_table task; the task's node is the source.
type MovePayload struct {
	Table string `json:"table"` // "schema.table" or "table"
	To    string `json:"to"`    // target node
	// SourceConninfo is how the target server reaches the source for its subscription; by
	// default the source node's conninfo. Like every conninfo it must not hold a password:
	// the target server needs its own (pgpass of its OS user).
	SourceConninfo string `json:"source_conninfo,omitempty"`
	// cleanup.LockTimeout bounds how long the switch makes other sessions queue behind its lock request.
	LockTimeout spec.Duration `json:"lock_timeout,omitempty"`
	// CatchUpTimeout bounds the wait for the target to catch up while writes are blocked; default 30s.
	CatchUpTimeout spec.Duration `json:"catch_up_timeout,omitempty"`
}

// MoveTable runs move_table tasks: it copies a table to the target node and keeps it in sync
// through logical replication, then — with writes to the source blocked (EXCLUSIVE lock; reads
// go on) and the target caught up — records success: the operation's final transaction is the
// switch. The source table is then dropped as a deferred drop, once no query uses it, and
// the replication scaffolding is removed. The table must have a primary key; columns, NOT
// NULL and the primary key are copied, other indexes, defaults and constraints are not. A table
// whose column types have constraints that run code of a role other than the owner's members
// is refused: copying and applying rows runs it as the owner.
// Applications must write to the target after the switch: writes to the source from then on
// are not copied. On PostgreSQL 15 and older only superusers may own subscriptions, so the
// owner must be a superuser there; it needs REPLICATION on the source in any case.
//
// Every resource is registered before it is created, so whatever fails — a statement, a
// connection, the worker process — the cleaner restores the state before the move (or, after
// the switch, finishes it).
type MoveTable struct {
	Cleaner *cleanup.Cleaner
	// LeaveToCleaner skips removing resources inline after the move ends, leaving them all to
	// the cleaner (tests use it to exercise `deckhand cleanup run`).
	LeaveToCleaner bool
}

// ParseMovePayload reads and checks a move_table payload.
func ParseMovePayload(raw json.RawMessage) (MovePayload, error) {
	var p MovePayload
	if err := spec.DecodePayload(KindMoveTable, raw, &p, `{"table": "schema.table", "to": "node"}`); err != nil {
		return p, err
	}
	if p.Table == "" || p.To == "" {
		return p, errors.New("move_table: payload needs table and to")
	}
	if _, err := nodeconn.ParseQualifiedName(p.Table); err != nil {
		return p, fmt.Errorf("move_table: %w", err)
	}
	// Zero means the default; anything else must be a timeout PostgreSQL takes.
	for _, d := range []struct {
		field string
		v     spec.Duration
	}{{"lock_timeout", p.LockTimeout}, {"catch_up_timeout", p.CatchUpTimeout}} {
		if d.v != 0 {
			if err := spec.CheckTimeout(d.field, d.v); err != nil {
				return p, fmt.Errorf("move_table: %w", err)
			}
		}
	}
	if p.SourceConninfo != "" {
		if err := nodeconn.CheckConninfo(p.SourceConninfo); err != nil {
			return p, fmt.Errorf("move_table: source_conninfo: %w", err)
		}
	}
	return p, nil
}

type tableDef struct {
	schema, name string
	columns      []string // column definitions
	primaryKey   []string
}

func (d tableDef) ident() string { return pgx.Identifier{d.schema, d.name}.Sanitize() }

func (d tableDef) createSQL() string {
	cols := append([]string(nil), d.columns...)
	pk := make([]string, len(d.primaryKey))
	for i, c := range d.primaryKey {
		pk[i] = pgx.Identifier{c}.Sanitize()
	}
	cols = append(cols, "PRIMARY KEY ("+strings.Join(pk, ", ")+")")
	return "CREATE TABLE " + d.ident() + " (" + strings.Join(cols, ", ") + ")"
}

// Run moves the table; see MoveTable.
func (m MoveTable) Run(ctx context.Context, t *deckhandtype.ClaimedTask) (err error) {
	c := m.Cleaner
	if t.Node == nil || t.NodeDSN == nil {
		return taskerr.Permanent(errors.New("the task's node is no longer registered"))
	}
	p, err := ParseMovePayload(t.Payload)
	if err != nil {
		return taskerr.Permanent(err)
	}
	if p.To == *t.Node {
		return taskerr.Permanent(fmt.Errorf("move_table: source and target are both node %s", p.To))
	}
	nodes, err := c.Catalog.NodesByName(ctx, []string{p.To})
	if err != nil {
		return err
	}
	target, ok := nodes[p.To]
	if !ok {
		return taskerr.Permanent(fmt.Errorf("move_table: unknown target node %q", p.To))
	}
	// An earlier attempt may have switched and then died before the engine heard of it: the
	// move is done, and what it left is the cleaner's.
	if done, err := c.Catalog.SucceededOperationOfTask(ctx, t.ID); err != nil {
		return err
	} else if done != 0 {
		c.Log().Info("move_table: an earlier attempt already moved the table", "task", t.ID, "operation", done)
		return nil
	}
	source := *t.Node
	sourceConninfo := p.SourceConninfo
	if sourceConninfo == "" {
		sourceConninfo = *t.NodeDSN
	}
	lockTimeout := time.Duration(p.LockTimeout)
	if lockTimeout <= 0 {
		lockTimeout = c.LockTimeoutFor(ctx)
	}
	catchUp := time.Duration(p.CatchUpTimeout)
	if catchUp <= 0 {
		catchUp = 30 * time.Second
	}

	// Both sessions are the owner's, each checked on its own node.
	srcOwner, err := nodeconn.TaskOwner(t)
	if err != nil {
		return err
	}
	srcConn, releaseSrc, err := c.Pools.Session(ctx, srcOwner, t)
	if err != nil {
		return err
	}
	defer releaseSrc()
	dstOwner := nodeconn.Owner{Node: target.Name, DSN: target.DSN, Role: t.Owner, Submitter: t.SubmittedBy}
	dstConn, releaseDst, err := c.Pools.Session(ctx, dstOwner, t)
	if err != nil {
		return err
	}
	defer releaseDst()

	def, err := readTableDef(ctx, srcConn, t.SearchPath, p.Table)
	if err != nil {
		return err
	}
	if by, err := c.Catalog.PinnedBy(ctx, cleanup.Table(source, def.schema, def.name)); err != nil {
		return err
	} else if by != "" {
		return taskerr.Permanent(fmt.Errorf("move_table: table %s is pinned by %s", def.ident(), by))
	}

	op, err := c.Begin(ctx, t, fmt.Sprintf("move table %s from %s to %s", def.ident(), source, p.To))
	if err != nil {
		return err
	}
	defer func() {
		if op.Ended() {
			return
		}
		// Record the failure at once so that the cleaner need not wait to find the orphan.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if ferr := op.Fail(fctx, err); ferr != nil {
			c.Log().Warn("move_table: could not record the failure; the cleaner will find the orphan", "operation", op.ID(), "err", ferr)
			return
		}
		if !m.LeaveToCleaner {
			if _, rerr := op.RemoveDue(fctx, 0); rerr != nil {
				c.Log().Warn("move_table: removal after failure left work to the cleaner", "operation", op.ID(), "err", rerr)
			}
		}
	}()
	step := func(name string, err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("move_table %s: %w", name, err)
	}
	// Slots are per server, and a server may hold several nodes or serve several catalogs: the
	// random part keeps names of different catalogs' operations apart.
	name := fmt.Sprintf("deckhand_move_%d_%08x", op.ID(), rand.Uint32())

	if err := step(StepCreateTable, m.createTable(ctx, op, dstConn, p.To, def)); err != nil {
		return err
	}
	if err := step(StepCreateTable, checkColumnTypes(ctx, dstConn, def)); err != nil {
		return err
	}
	if err := step(StepCreatePublication, createIn(ctx, op, srcConn, cleanup.Publication(source, name),
		"CREATE PUBLICATION "+pgx.Identifier{name}.Sanitize()+" FOR TABLE "+def.ident())); err != nil {
		return err
	}
	if _, err := op.Register(ctx, cleanup.ReplicationSlot(source, name), cleanup.Always); err != nil {
		return err
	}
	repl, snapshot, err := createSlot(ctx, srcOwner, t, name)
	if err != nil {
		return step(StepCreateSlot, err)
	}
	defer repl.Close(context.Background()) //nolint:errcheck
	if err := step(StepCreateSubscription, createIn(ctx, op, dstConn, cleanup.Subscription(p.To, name),
		"CREATE SUBSCRIPTION "+pgx.Identifier{name}.Sanitize()+" CONNECTION "+literal(sourceConninfo)+
			" PUBLICATION "+pgx.Identifier{name}.Sanitize()+
			" WITH (create_slot = false, slot_name = "+literal(name)+", copy_data = false, enabled = false)")); err != nil {
		return err
	}
	if err := step(StepCopy, copyTable(ctx, srcConn, dstConn, snapshot, def)); err != nil {
		return err
	}
	repl.Close(ctx) //nolint:errcheck // the snapshot is no longer needed
	if _, err := dstConn.Exec(ctx, "ALTER SUBSCRIPTION "+pgx.Identifier{name}.Sanitize()+" ENABLE"); err != nil {
		return step(StepCopy, err)
	}
	if err := step(StepSwitch, m.switchOver(ctx, op, srcConn, dstConn, source, def, name, lockTimeout, catchUp)); err != nil {
		return err
	}
	if !m.LeaveToCleaner {
		rep, err := op.RemoveDue(ctx, 5*time.Second)
		if err != nil {
			c.Log().Warn("move_table: removal left work to the cleaner", "operation", op.ID(), "err", err)
		} else if left := len(rep.Actions) - rep.Count(deckhandtype.CleanupRemoved); left > 0 {
			c.Log().Info("move_table: the cleaner will finish removing", "operation", op.ID(), "left", left)
		}
	}
	return nil
}

// createIn registers r, then runs stmt (which creates it) on conn.
func createIn(ctx context.Context, op *cleanup.Operation, conn *pgx.Conn, r cleanup.Resource, stmt string) error {
	id, err := op.Register(ctx, r, cleanup.Always)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate object: not ours
			if ferr := op.Forget(ctx, id); ferr != nil {
				return errors.Join(err, ferr)
			}
			return taskerr.Permanent(err)
		}
		return err
	}
	return nil
}

// createTable creates the table, and its schema if missing, on the target. Both are checked
// to be free first: a record naming something that was already there would remove it.
func (m MoveTable) createTable(ctx context.Context, op *cleanup.Operation, conn *pgx.Conn, node string, def tableDef) error {
	var schemaExists, tableExists bool
	err := conn.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1::pg_catalog.text),
		       pg_catalog.to_regclass($2::pg_catalog.text) IS NOT NULL`,
		def.schema, def.ident()).Scan(&schemaExists, &tableExists)
	if err != nil {
		return err
	}
	if tableExists {
		return taskerr.Permanent(fmt.Errorf("table %s already exists on node %s", def.ident(), node))
	}
	if !schemaExists {
		id, err := op.Register(ctx, cleanup.Schema(node, def.schema), cleanup.OnFailure)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{def.schema}.Sanitize()); err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42P06" {
				return err
			}
			// Someone else created it meanwhile: it is theirs.
			if err := op.Forget(ctx, id); err != nil {
				return err
			}
		}
	}
	id, err := op.Register(ctx, cleanup.Table(node, def.schema, def.name), cleanup.OnFailure)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, def.createSQL()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P07" {
			if ferr := op.Forget(ctx, id); ferr != nil {
				return errors.Join(err, ferr)
			}
			return taskerr.Permanent(err)
		}
		return err
	}
	return nil
}

// untrustedTypesSQL lists the domains among the column types of table $1, at any depth (a
// domain's base type, an array's element, a composite's or a range's parts), whose CHECK
// constraints could run code of a role that is not a member of the session user: a domain or
// a function or operator it calls that such a role owns (and so may change). Copying rows into
// the table, and applying changes to it, evaluates those constraints as the session user.
const untrustedTypesSQL = `
	WITH RECURSIVE types(oid) AS (
		SELECT a.atttypid FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1::pg_catalog.text::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped
		UNION
		SELECT p.part FROM types t JOIN pg_catalog.pg_type y ON y.oid = t.oid
		CROSS JOIN LATERAL (
			SELECT y.typbasetype UNION ALL SELECT y.typelem
			UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a WHERE a.attrelid = y.typrelid AND a.attnum > 0
			UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = y.oid) p(part)
		WHERE p.part <> 0
	)
	SELECT pg_catalog.format_type(y.oid, NULL) FROM types t JOIN pg_catalog.pg_type y ON y.oid = t.oid
	WHERE y.typtype = 'd' AND (NOT pg_catalog.pg_has_role(y.typowner, SESSION_USER, 'MEMBER'::pg_catalog.text) OR EXISTS (
		SELECT 1 FROM pg_catalog.pg_constraint c
		JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = c.oid
		LEFT JOIN pg_catalog.pg_operator o ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = d.refobjid
		JOIN pg_catalog.pg_proc f ON (d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND f.oid = d.refobjid) OR f.oid = o.oprcode
		WHERE c.contypid = y.oid
		  AND NOT (pg_catalog.pg_has_role(f.proowner, SESSION_USER, 'MEMBER'::pg_catalog.text)
		           AND pg_catalog.pg_has_role(coalesce(o.oprowner, f.proowner), SESSION_USER, 'MEMBER'::pg_catalog.text))))
	ORDER BY 1`

// checkColumnTypes refuses a target table whose column types would run, while rows are copied
// in and changes applied, code that a role other than the owner's members may write: the move
// runs as the owner (a superuser on PostgreSQL 15 and older), and that code would run so too.
// It runs on the target, where the table's types are the ones its rows go through.
func checkColumnTypes(ctx context.Context, conn *pgx.Conn, def tableDef) error {
	rows, _ := conn.Query(ctx, untrustedTypesSQL, def.ident())
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(types) > 0 {
		return taskerr.Permanent(fmt.Errorf("table %s has columns of type %s, whose constraints run code of a role "+
			"that is not a member of the task's owner: the move would run it as the owner", def.ident(), strings.Join(types, ", ")))
	}
	return nil
}

// readTableDef reads what the target table needs from the source; the table's name is
// resolved with the job's search_path.
func readTableDef(ctx context.Context, conn *pgx.Conn, searchPath, table string) (tableDef, error) {
	id, err := nodeconn.ParseQualifiedName(table)
	if err != nil {
		return tableDef{}, taskerr.Permanent(err)
	}
	oids, err := nodeconn.ResolveNames(ctx, conn, searchPath, []pgx.Identifier{id})
	if err != nil {
		return tableDef{}, err
	}
	oid := oids[0]
	rel, err := nodeconn.Relation(ctx, conn, oid)
	if err != nil {
		return tableDef{}, err
	}
	if rel.Kind == "" {
		return tableDef{}, taskerr.Permanent(fmt.Errorf("table %s does not exist", id.Sanitize()))
	}
	if rel.Kind != "r" {
		return tableDef{}, taskerr.Permanent(fmt.Errorf("%s is not a plain table (relkind %s)", id.Sanitize(), rel.Kind))
	}
	d := tableDef{schema: rel.Name[0], name: rel.Name[1]}
	// The session's search_path is pg_catalog's alone: operators here are pg_catalog's.
	rows, _ := conn.Query(ctx, `
		SELECT a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated <> ''
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1::pg_catalog.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid)
	var colName, colType string
	var notNull, generated bool
	_, err = pgx.ForEachRow(rows, []any{&colName, &colType, &notNull, &generated}, func() error {
		if generated {
			return taskerr.Permanent(fmt.Errorf("table %s has a generated column (%s), which move_table does not support", d.ident(), colName))
		}
		col := pgx.Identifier{colName}.Sanitize() + " " + colType
		if notNull {
			col += " NOT NULL"
		}
		d.columns = append(d.columns, col)
		return nil
	})
	if err != nil {
		return d, err
	}
	err = conn.QueryRow(ctx, `
		SELECT coalesce(pg_catalog.array_agg(a.attname::pg_catalog.text ORDER BY k.ord), '{}')
		FROM pg_catalog.pg_index i CROSS JOIN LATERAL pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1::pg_catalog.oid AND i.indisprimary`, oid).Scan(&d.primaryKey)
	if err != nil {
		return d, err
	}
	if len(d.primaryKey) == 0 {
		return d, taskerr.Permanent(fmt.Errorf("table %s has no primary key, which logical replication needs", d.ident()))
	}
	return d, nil
}

// createSlot creates the logical slot on a replication connection that exports a snapshot:
// the copy reads exactly the rows the slot's changes start after. The connection must stay
// open and idle until the copy has started. A replication connection cannot be pooled; it is
// the owner's on the node whose owner session (of the same attempt) passed OwnerConn's check,
// and it runs nothing but CREATE_REPLICATION_SLOT.
func createSlot(ctx context.Context, o nodeconn.Owner, t *deckhandtype.ClaimedTask, name string) (*pgconn.PgConn, string, error) {
	cfg, err := pgconn.ParseConfig(nodeconn.WithUser(o.DSN, o.Role))
	if err != nil || cfg.User != o.Role {
		return nil, "", taskerr.Permanent(errors.New("node conninfo cannot be parsed"))
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["search_path"] = nodeconn.SafeSearchPath
	cfg.RuntimeParams["application_name"] = nodeconn.ApplicationName(t.ID, t.Token)
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("replication connection to node %s as %s: %w", o.Node, o.Role, err)
	}
	res, err := conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+pgx.Identifier{name}.Sanitize()+" LOGICAL pgoutput EXPORT_SNAPSHOT").ReadAll()
	if err == nil && (len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 3) {
		err = errors.New("unexpected reply to CREATE_REPLICATION_SLOT")
	}
	if err != nil {
		conn.Close(context.Background()) //nolint:errcheck
		return nil, "", err
	}
	return conn, string(res[0].Rows[0][2]), nil
}

// copyTable copies the source rows visible in the slot's snapshot into the target table, in
// one transaction on each side.
func copyTable(ctx context.Context, src, dst *pgx.Conn, snapshot string, def tableDef) error {
	srcTx, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer srcTx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := srcTx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+literal(snapshot)); err != nil {
		return err
	}
	dstTx, err := dst.Begin(ctx)
	if err != nil {
		return err
	}
	defer dstTx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		_, err := src.PgConn().CopyTo(ctx, pw, "COPY "+def.ident()+" TO STDOUT (FORMAT binary)")
		pw.CloseWithError(err)
		copied <- err
	}()
	_, err = dst.PgConn().CopyFrom(ctx, pr, "COPY "+def.ident()+" FROM STDIN (FORMAT binary)")
	pr.CloseWithError(errors.New("copy into the target ended"))
	if srcErr := <-copied; srcErr != nil && err == nil {
		err = srcErr
	}
	if err != nil {
		return err
	}
	return dstTx.Commit(ctx)
}

// switchOver blocks writes to the source, waits until the target has applied everything, and
// ends the operation successfully — the switch — before letting writers go.
func (m MoveTable) switchOver(ctx context.Context, op *cleanup.Operation, src, dst *pgx.Conn, source string, def tableDef, sub string, lockTimeout, catchUp time.Duration) error {
	// The source table goes once the move has succeeded (a deferred drop, once no query uses
	// it), and stays if it fails.
	if _, err := op.Register(ctx, cleanup.Table(source, def.schema, def.name), cleanup.DeferredOnSuccess); err != nil {
		return err
	}
	// Catch up without blocking anyone first, so that the wait under the lock is short.
	if err := waitCaughtUp(ctx, src, dst, sub, 5*time.Minute); err != nil {
		return err
	}
	var tx pgx.Tx
	backoff := time.Second
	for {
		var err error
		tx, err = src.Begin(ctx)
		if err != nil {
			return err
		}
		err = cleanup.SetLockTimeout(ctx, tx, lockTimeout)
		if err == nil {
			_, err = tx.Exec(ctx, "LOCK TABLE "+def.ident()+" IN EXCLUSIVE MODE")
		}
		if err == nil {
			break
		}
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
		if !taskerr.InUse(err) {
			return err
		}
		err = cleanup.WaitFree(ctx, 50*time.Millisecond, backoff, func(ctx context.Context) (bool, error) {
			return cleanup.RelationBusy(ctx, src, []string{def.ident()})
		})
		if err != nil {
			return err
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if err := waitCaughtUpTx(ctx, tx, dst, sub, catchUp); err != nil {
		return err
	}
	if err := op.Succeed(ctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// The move has succeeded; this only ends the write block a moment later.
		m.Cleaner.Log().Warn("move_table: releasing the source lock failed", "operation", op.ID(), "err", err)
	}
	return nil
}

func waitCaughtUp(ctx context.Context, src, dst *pgx.Conn, sub string, timeout time.Duration) error {
	var lsn string
	if err := src.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text`).Scan(&lsn); err != nil {
		return err
	}
	return waitLSN(ctx, dst, sub, lsn, timeout)
}

func waitCaughtUpTx(ctx context.Context, tx pgx.Tx, dst *pgx.Conn, sub string, timeout time.Duration) error {
	var lsn string
	// The insert position, not the write position: commits made with synchronous_commit off
	// may not be written yet, and must be waited for too.
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text`).Scan(&lsn); err != nil {
		return err
	}
	return waitLSN(ctx, dst, sub, lsn, timeout)
}

// waitLSN waits until the subscription has received everything up to lsn: the walsender
// reports its position once it has sent all before it, and the apply worker applies in order.
func waitLSN(ctx context.Context, dst *pgx.Conn, sub, lsn string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var done bool
		err := dst.QueryRow(ctx, `
			SELECT coalesce((SELECT s.latest_end_lsn >= $2::pg_catalog.pg_lsn FROM pg_catalog.pg_stat_subscription s
			                 JOIN pg_catalog.pg_subscription p ON p.oid = s.subid
			                 WHERE p.subname = $1::pg_catalog.text AND s.relid IS NULL
			                   AND p.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d
			                                    WHERE d.datname = pg_catalog.current_database())), false)`,
			sub, lsn).Scan(&done)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the target did not catch up with the source (WAL %s) within %s", lsn, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// literal quotes a string as an escape-string literal, whatever standard_conforming_strings says.
func literal(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Feature is the move feature, for engine.Open and engine.NewWorker: the online move (kind
// move) and the older move_table.
func Feature() engine.Feature {
	return engine.Feature{Name: "move", Kinds: []engine.Kind{{
		Name: Kind,
		Validate: func(raw json.RawMessage) error {
			_, err := ParsePayload(raw)
			return err
		},
		New: func(d engine.Deps) engine.Executor { return Mover{Cleaner: d.Cleaner} },
	}, {
		Name: KindMoveTable, NeedsNode: true,
		Validate: func(raw json.RawMessage) error {
			_, err := ParseMovePayload(raw)
			return err
		},
		New: func(d engine.Deps) engine.Executor { return MoveTable{Cleaner: d.Cleaner} },
	}}}
}
