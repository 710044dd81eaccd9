package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/spec"
)

// KindDrop drops tables as soon as no query uses them.
const KindDrop = "drop"

func init() {
	spec.RegisterKind(KindDrop, true, func(raw json.RawMessage) error {
		_, err := ParseDropPayload(raw)
		return err
	})
}

// DefaultLockTimeout bounds how long a drop may make other sessions queue behind its ACCESS
// EXCLUSIVE lock request. The catalog setting cleanup_lock_timeout overrides it.
const DefaultLockTimeout = 100 * time.Millisecond

// LockTimeoutSetting is the deckhand.setting that overrides DefaultLockTimeout.
const LockTimeoutSetting = "cleanup_lock_timeout"

// LockTimeout reads the configured lock timeout of drops, DefaultLockTimeout when unset or invalid.
func LockTimeout(ctx context.Context, cat *catalog.Catalog) time.Duration {
	if cat == nil {
		return DefaultLockTimeout
	}
	v, err := cat.Setting(ctx, LockTimeoutSetting, "")
	if err != nil || v == "" {
		return DefaultLockTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return DefaultLockTimeout
	}
	return d
}

// DropPayload is the payload of a drop task.
type DropPayload struct {
	// Tables to drop, each "schema.table" or "table" (resolved with the job's search_path);
	// quoted identifiers ("My Table") keep their case.
	Tables []string `json:"tables"`
	// LockTimeout overrides the catalog's cleanup_lock_timeout for this task.
	LockTimeout spec.Duration `json:"lock_timeout,omitempty"`
}

// ParseDropPayload reads and checks a drop task's payload.
func ParseDropPayload(raw json.RawMessage) (DropPayload, error) {
	var p DropPayload
	if err := DecodePayload(KindDrop, raw, &p, `{"tables": ["schema.table", ...]}`); err != nil {
		return p, err
	}
	if len(p.Tables) == 0 {
		return p, errors.New("drop: payload names no tables")
	}
	for _, t := range p.Tables {
		if _, err := ParseQualifiedName(t); err != nil {
			return p, fmt.Errorf("drop: %w", err)
		}
	}
	if p.LockTimeout != 0 { // zero: the catalog's cleanup_lock_timeout
		if err := spec.CheckTimeout("lock_timeout", p.LockTimeout); err != nil {
			return p, fmt.Errorf("drop: %w", err)
		}
	}
	return p, nil
}

// InUse reports whether a drop failed only because something else holds the object: its
// lock_timeout expired (55P03), the object is in use (55006: an active replication slot), or
// it lost a deadlock (40P01). Such drops are retried once the object is free.
func InUse(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", "55006", "40P01":
		return true
	}
	return false
}

// DropInTx runs a DROP statement in its own transaction under lock_timeout, so that sessions
// arriving after it queue behind its lock request for at most that long.
func DropInTx(ctx context.Context, conn *pgx.Conn, stmt string, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := SetLockTimeout(ctx, tx, lockTimeout); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt)
		return err
	})
}

// SetLockTimeout sets lock_timeout for the rest of tx.
func SetLockTimeout(ctx context.Context, tx pgx.Tx, d time.Duration) error {
	_, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout'::pg_catalog.text, $1::pg_catalog.text, true)`, millis(d))
	return err
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

// RelationBusy reports whether another session holds, or waits for, a lock on any of the
// relations (qualified, quoted names); relations that do not exist count as free. Reading
// pg_locks takes no lock on the relations, so probing never gets in anyone's way.
func RelationBusy(ctx context.Context, conn *pgx.Conn, relations []string) (bool, error) {
	var busy bool
	err := conn.QueryRow(ctx, relationBusySQL, relations).Scan(&busy)
	return busy, err
}

// relationBusySQL runs in owner sessions whose search_path is SafeSearchPath, so its operators
// are pg_catalog's; its functions are named with their schema and argument types.
const relationBusySQL = `
	SELECT EXISTS (
		SELECT 1 FROM pg_catalog.pg_locks l
		WHERE l.locktype = 'relation'
		  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
		  AND l.relation IN (SELECT pg_catalog.to_regclass(r)::pg_catalog.oid FROM pg_catalog.unnest($1::pg_catalog.text[]) AS r
		                     UNION ALL
		                     SELECT i.indrelid FROM pg_catalog.pg_index i
		                     WHERE i.indexrelid IN (SELECT pg_catalog.to_regclass(r)::pg_catalog.oid FROM pg_catalog.unnest($1::pg_catalog.text[]) AS r))
		  AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid())`

// WaitFree waits until busy reports false or max has passed, probing every interval. It
// returns ctx's error when ctx ends first.
func WaitFree(ctx context.Context, interval, max time.Duration, busy func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		b, err := busy(ctx)
		if err != nil {
			return err
		}
		if !b {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(interval, time.Until(deadline))):
		}
	}
	return ctx.Err()
}

// Drop runs drop tasks: each table is dropped in its own short transaction with a short
// lock_timeout, as soon as no query uses it. While pg_locks shows the table in use (probed
// every ProbeInterval) the drop does not even ask for its lock; when it asks and a query holds
// the table, it steps back at the lock timeout — so queries arriving meanwhile wait at most that
// long — and tries again as soon as the table is seen free, or after a backoff (doubling up
// to MaxBackoff) for tables that are never seen free. It never uses
// CASCADE, refuses pinned tables, and runs connected as the task's owner: a table the owner
// may not drop fails at once, permanently, with PostgreSQL's reason.
type Drop struct {
	Pools   *Pools
	Catalog *catalog.Catalog // pins and the lock timeout setting
	// Zero values mean the defaults: the catalog's cleanup_lock_timeout (DefaultLockTimeout),
	// 50ms, 1s and 30s.
	LockTimeout   time.Duration
	ProbeInterval time.Duration
	MinBackoff    time.Duration
	MaxBackoff    time.Duration
}

func (d Drop) Run(ctx context.Context, t *catalog.ClaimedTask) error {
	o, err := TaskOwner(t)
	if err != nil {
		return err
	}
	p, err := ParseDropPayload(t.Payload)
	if err != nil {
		return Permanent(err)
	}
	lockTimeout := time.Duration(p.LockTimeout)
	if lockTimeout == 0 {
		lockTimeout = d.LockTimeout
	}
	if lockTimeout == 0 {
		lockTimeout = LockTimeout(ctx, d.Catalog)
	}
	probe, minBackoff, maxBackoff := d.ProbeInterval, d.MinBackoff, d.MaxBackoff
	if probe <= 0 {
		probe = 50 * time.Millisecond
	}
	if minBackoff <= 0 {
		minBackoff = time.Second
	}
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}

	conn, release, err := d.Pools.Session(ctx, o, t)
	if err != nil {
		return err
	}
	defer release()

	tables, err := resolveTables(ctx, conn, t.SearchPath, p.Tables, t.Run <= 1)
	if err != nil {
		return err
	}
	// Pins are checked for every table before any is dropped, so a refused job drops nothing:
	// the table's own, and those of what DROP TABLE takes with it (partitions, indexes).
	if d.Catalog != nil {
		for _, tb := range tables {
			by, err := d.Catalog.PinnedBy(ctx, catalog.CleanupResource{Type: catalog.ResourceTable, Node: *t.Node, Location: tb[0], Name: tb[1]})
			if err != nil {
				return err
			}
			if by != "" {
				return Permanent(fmt.Errorf("refusing to drop table %s: it is pinned by %s", tb.Sanitize(), by))
			}
			taken, err := takenWith(ctx, conn, tb)
			if err != nil {
				return err
			}
			for _, r := range taken {
				r.Node = *t.Node
				by, err := d.Catalog.PinnedBy(ctx, r)
				if err != nil {
					return err
				}
				if by != "" {
					return Permanent(fmt.Errorf("refusing to drop table %s: it would take %s %s with it, which is pinned by %s",
						tb.Sanitize(), r.Type, pgx.Identifier{r.Location, r.Name}.Sanitize(), by))
				}
			}
		}
	}
	if err := checkOwnership(ctx, conn, tables, lockTimeout); err != nil {
		return err
	}
	for _, tb := range tables {
		if err := d.dropOne(ctx, conn, tb, lockTimeout, probe, minBackoff, maxBackoff); err != nil {
			return err
		}
	}
	return nil
}

func (d Drop) dropOne(ctx context.Context, conn *pgx.Conn, tb pgx.Identifier, lockTimeout, probe, backoff, maxBackoff time.Duration) error {
	name := tb.Sanitize()
	stmt := "DROP TABLE IF EXISTS " + name
	busy := func(ctx context.Context) (bool, error) { return RelationBusy(ctx, conn, []string{name}) }
	// A table seen in use is waited for before anyone is made to queue behind a lock request.
	if err := WaitFree(ctx, probe, backoff, busy); err != nil {
		return err
	}
	for {
		err := DropInTx(ctx, conn, stmt, lockTimeout)
		if err == nil || !InUse(err) {
			return err
		}
		// In use: step back so that nobody queues behind us, and come back the moment the
		// table is free (or after the backoff, for a table never seen free).
		if err := WaitFree(ctx, probe, backoff, busy); err != nil {
			return err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// takenWithSQL lists what DROP TABLE $1 removes besides the table: the partitions of a
// partitioned table, at every level, and the indexes of all of them. It runs in owner sessions
// whose search_path is SafeSearchPath, so its operators are pg_catalog's.
const takenWithSQL = `
	WITH rels AS (
		SELECT pg_catalog.to_regclass($1::pg_catalog.text)::pg_catalog.oid AS oid
		UNION
		SELECT p.relid::pg_catalog.oid FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1::pg_catalog.text)) p
	)
	SELECT CASE WHEN c.relkind IN ('i', 'I') THEN 'index' ELSE 'table' END, n.nspname::pg_catalog.text, c.relname::pg_catalog.text
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE (c.oid IN (SELECT r.oid FROM rels r) AND c.oid <> pg_catalog.to_regclass($1::pg_catalog.text)::pg_catalog.oid)
	   OR c.oid IN (SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT r.oid FROM rels r))
	ORDER BY 2, 3`

// takenWith lists what dropping table takes with it, as resources to check for pins.
func takenWith(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) ([]catalog.CleanupResource, error) {
	rows, _ := conn.Query(ctx, takenWithSQL, table.Sanitize())
	var out []catalog.CleanupResource
	var r catalog.CleanupResource
	_, err := pgx.ForEachRow(rows, []any{&r.Type, &r.Location, &r.Name}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list what dropping %s removes: %w", table.Sanitize(), err)
	}
	return out, nil
}

// checkOwnership refuses the whole task, before anything is dropped, if the owner may not drop
// one of the tables. The refusal is PostgreSQL's own: the DROP is tried in a transaction that is
// rolled back. It costs no lock: PostgreSQL checks ownership before locking the table.
func checkOwnership(ctx context.Context, conn *pgx.Conn, tables []pgx.Identifier, lockTimeout time.Duration) error {
	names := make([]string, len(tables))
	for i, tb := range tables {
		names[i] = tb.Sanitize()
	}
	rows, _ := conn.Query(ctx, `
		SELECT n FROM pg_catalog.unnest($1::pg_catalog.text[]) AS n
		WHERE NOT pg_catalog.pg_has_role(CURRENT_USER,
			(SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass(n)::pg_catalog.oid),
			'USAGE'::pg_catalog.text)`, names)
	refused, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range refused {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		err = SetLockTimeout(ctx, tx, lockTimeout)
		if err == nil {
			_, err = tx.Exec(ctx, "DROP TABLE IF EXISTS "+name)
		}
		if rbErr := tx.Rollback(ctx); rbErr != nil && err == nil {
			err = rbErr
		}
		if err != nil && !InUse(err) && !Retryable(err) {
			return Permanent(err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// resolveTables turns names, resolved with the job's search_path, into schema-qualified
// tables. On the first run every table must exist and be a table; on later runs a missing
// table was dropped by an earlier attempt.
func resolveTables(ctx context.Context, conn *pgx.Conn, searchPath string, names []string, firstRun bool) ([]pgx.Identifier, error) {
	ids := make([]pgx.Identifier, len(names))
	for i, n := range names {
		id, err := ParseQualifiedName(n)
		if err != nil {
			return nil, Permanent(err)
		}
		ids[i] = id
	}
	oids, err := ResolveNames(ctx, conn, searchPath, ids)
	if err != nil {
		return nil, err
	}
	var out []pgx.Identifier
	var missing []string
	seen := map[uint32]bool{}
	for i, oid := range oids {
		if oid == 0 {
			missing = append(missing, ids[i].Sanitize())
			continue
		}
		if seen[oid] {
			continue
		}
		seen[oid] = true
		rel, err := Relation(ctx, conn, oid)
		if err != nil {
			return nil, err
		}
		if rel.Kind == "" {
			missing = append(missing, ids[i].Sanitize()) // dropped meanwhile
			continue
		}
		if rel.Kind != "r" && rel.Kind != "p" {
			return nil, Permanent(fmt.Errorf("%s is not a table (relkind %s)", ids[i].Sanitize(), rel.Kind))
		}
		out = append(out, rel.Name)
	}
	if len(missing) > 0 && firstRun {
		return nil, Permanent(fmt.Errorf("table %s does not exist; nothing was dropped", strings.Join(missing, ", ")))
	}
	return out, nil
}
