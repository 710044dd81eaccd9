// Package drop is the drop feature: the task kind "drop" drops tables as soon as no query uses
// them, never making writers queue behind its lock for longer than the lock timeout.
package drop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
	"github.com/deckhandhq/deckhand/spec"
	"github.com/jackc/pgx/v5"
)

// KindDrop drops tables as soon as no query uses them.
const KindDrop = "drop"

// Payload is the payload of a drop task.
type Payload struct {
	// Tables to drop, each "schema.table" or "table" (resolved with the job's search_path);
	// quoted identifiers ("My Table") keep their case.
	Tables []string `json:"tables"`
	// LockTimeout overrides the catalog's cleanup_lock_timeout for this task.
	LockTimeout spec.Duration `json:"lock_timeout,omitempty"`
}

// ParsePayload reads and checks a drop task's payload.
func ParsePayload(raw json.RawMessage) (Payload, error) {
	var p Payload
	if err := spec.DecodePayload(KindDrop, raw, &p, `{"tables": ["schema.table", ...]}`); err != nil {
		return p, err
	}
	if len(p.Tables) == 0 {
		return p, errors.New("drop: payload names no tables")
	}
	for _, t := range p.Tables {
		if _, err := nodeconn.ParseQualifiedName(t); err != nil {
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

// Drop runs drop tasks: each table is dropped in its own short transaction with a short
// lock_timeout, as soon as no query uses it. While pg_locks shows the table in use (probed
// every ProbeInterval) the drop does not even ask for its lock; when it asks and a query holds
// the table, it steps back at the lock timeout — so queries arriving meanwhile wait at most that
// long — and tries again as soon as the table is seen free, or after a backoff (doubling up
// to MaxBackoff) for tables that are never seen free. It never uses
// CASCADE, refuses pinned tables, and runs connected as the task's owner: a table the owner
// may not drop fails at once, permanently, with PostgreSQL's reason.
type Drop struct {
	Pools   *nodeconn.Pools
	Catalog *catalog.Catalog // pins and the lock timeout setting
	// Zero values mean the defaults: the catalog's cleanup_lock_timeout (DefaultLockTimeout),
	// 50ms, 1s and 30s.
	LockTimeout   time.Duration
	ProbeInterval time.Duration
	MinBackoff    time.Duration
	MaxBackoff    time.Duration
}

func (d Drop) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	o, err := nodeconn.TaskOwner(t)
	if err != nil {
		return err
	}
	p, err := ParsePayload(t.Payload)
	if err != nil {
		return taskerr.Permanent(err)
	}
	lockTimeout := time.Duration(p.LockTimeout)
	if lockTimeout == 0 {
		lockTimeout = d.LockTimeout
	}
	if lockTimeout == 0 {
		lockTimeout = cleanup.LockTimeout(ctx, d.Catalog)
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
	// Pins are checked for every table before any is dropped, so a refused job drops nothing;
	// and again for each once its lock is held (dropOne), for pins taken while it waited.
	for _, tb := range tables {
		if err := d.checkPins(ctx, conn, *t.Node, tb); err != nil {
			return err
		}
	}
	if err := checkOwnership(ctx, conn, tables, lockTimeout); err != nil {
		return err
	}
	for _, tb := range tables {
		if err := d.dropOne(ctx, conn, *t.Node, tb, lockTimeout, probe, minBackoff, maxBackoff); err != nil {
			return err
		}
	}
	return nil
}

// checkPins refuses, permanently, a table that is pinned or whose drop would take a pinned
// partition or index with it: the table's own pins, and those of what DROP TABLE removes.
func (d Drop) checkPins(ctx context.Context, conn *pgx.Conn, node string, tb pgx.Identifier) error {
	if d.Catalog == nil {
		return nil
	}
	by, err := d.Catalog.PinnedBy(ctx, deckhandtype.CleanupResource{Type: deckhandtype.ResourceTable, Node: node, Location: tb[0], Name: tb[1]})
	if err != nil {
		return err
	}
	if by != "" {
		return taskerr.Permanent(fmt.Errorf("refusing to drop table %s: it is pinned by %s", tb.Sanitize(), by))
	}
	taken, err := takenWith(ctx, conn, tb)
	if err != nil {
		return err
	}
	for _, r := range taken {
		r.Node = node
		by, err := d.Catalog.PinnedBy(ctx, r)
		if err != nil {
			return err
		}
		if by != "" {
			return taskerr.Permanent(fmt.Errorf("refusing to drop table %s: it would take %s %s with it, which is pinned by %s",
				tb.Sanitize(), r.Type, pgx.Identifier{r.Location, r.Name}.Sanitize(), by))
		}
	}
	return nil
}

func (d Drop) dropOne(ctx context.Context, conn *pgx.Conn, node string, tb pgx.Identifier, lockTimeout, probe, backoff, maxBackoff time.Duration) error {
	name := tb.Sanitize()
	busy := func(ctx context.Context) (bool, error) { return cleanup.RelationBusy(ctx, conn, []string{name}) }
	// A table seen in use is waited for before anyone is made to queue behind a lock request.
	if err := cleanup.WaitFree(ctx, probe, backoff, busy); err != nil {
		return err
	}
	for {
		err := d.lockCheckDrop(ctx, conn, node, tb, lockTimeout)
		if err == nil || !taskerr.InUse(err) {
			return err
		}
		// In use: step back so that nobody queues behind us, and come back the moment the
		// table is free (or after the backoff, for a table never seen free).
		if err := cleanup.WaitFree(ctx, probe, backoff, busy); err != nil {
			return err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// lockCheckDrop drops the table in one transaction under lockTimeout: it locks it, checks the
// pins again, then drops it. A drop may wait hours for the queries that use a table, and a
// pin taken meanwhile (a legal hold) must keep it, as the docs promise; with the lock held no
// query can use the table until the transaction ends, and only a pin taken in the moment
// between the check and the commit comes too late. A table that is gone counts as dropped.
func (d Drop) lockCheckDrop(ctx context.Context, conn *pgx.Conn, node string, tb pgx.Identifier, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := cleanup.SetLockTimeout(ctx, tx, lockTimeout); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`, tb.Sanitize()).Scan(&exists); err != nil || !exists {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+tb.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		// Everyone who uses the table queues behind the lock while the catalog is asked: a
		// catalog that does not answer (packets dropped, a failover) must not keep them there.
		// Past pinWait the lock is given up and the drop tried again later.
		pctx, cancel := context.WithTimeout(ctx, pinWait(lockTimeout))
		defer cancel()
		if err := d.checkPins(pctx, tx.Conn(), node, tb); err != nil {
			if pctx.Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("the catalog did not answer the check of %s's pins within %s while the drop held its lock; "+
					"the lock was given up: %w", tb.Sanitize(), pinWait(lockTimeout), err)
			}
			return err
		}
		_, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+tb.Sanitize())
		return err
	})
}

// pinWait bounds how long the table's users may wait behind a drop's lock for the catalog's
// answer about its pins: the drop's lock_timeout, which bounds how long they wait behind its
// request for the lock, but at least a second, a few catalog round trips even far away.
func pinWait(lockTimeout time.Duration) time.Duration { return max(lockTimeout, time.Second) }

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
func takenWith(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) ([]deckhandtype.CleanupResource, error) {
	rows, _ := conn.Query(ctx, takenWithSQL, table.Sanitize())
	var out []deckhandtype.CleanupResource
	var r deckhandtype.CleanupResource
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
		err = cleanup.SetLockTimeout(ctx, tx, lockTimeout)
		if err == nil {
			_, err = tx.Exec(ctx, "DROP TABLE IF EXISTS "+name)
		}
		if rbErr := tx.Rollback(ctx); rbErr != nil && err == nil {
			err = rbErr
		}
		if err != nil && !taskerr.InUse(err) && !taskerr.Retryable(err) {
			return taskerr.Permanent(err)
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
		id, err := nodeconn.ParseQualifiedName(n)
		if err != nil {
			return nil, taskerr.Permanent(err)
		}
		ids[i] = id
	}
	oids, err := nodeconn.ResolveNames(ctx, conn, searchPath, ids)
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
		rel, err := nodeconn.Relation(ctx, conn, oid)
		if err != nil {
			return nil, err
		}
		if rel.Kind == "" {
			missing = append(missing, ids[i].Sanitize()) // dropped meanwhile
			continue
		}
		if rel.Kind != "r" && rel.Kind != "p" {
			return nil, taskerr.Permanent(fmt.Errorf("%s is not a table (relkind %s)", ids[i].Sanitize(), rel.Kind))
		}
		out = append(out, rel.Name)
	}
	if len(missing) > 0 && firstRun {
		return nil, taskerr.Permanent(fmt.Errorf("table %s does not exist; nothing was dropped", strings.Join(missing, ", ")))
	}
	return out, nil
}

// Feature is the drop feature, for engine.Open and engine.NewWorker.
func Feature() engine.Feature {
	return engine.Feature{Name: "drop", Kinds: []engine.Kind{{
		Name: KindDrop, NeedsNode: true,
		Validate: func(raw json.RawMessage) error {
			_, err := ParsePayload(raw)
			return err
		},
		New: func(d engine.Deps) engine.Executor { return Drop{Catalog: d.Catalog, Pools: d.Nodes} },
	}}}
}
