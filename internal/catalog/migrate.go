package catalog

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q has no numeric prefix", e.Name())
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// SchemaVersion is the newest migration this build knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate creates or upgrades the schema. It is idempotent and safe to run from several
// processes at once: each migration's transaction first locks the version table. It returns
// the versions applied.
func (c *Catalog) Migrate(ctx context.Context) ([]int, error) {
	return c.MigrateTo(ctx, SchemaVersion())
}

// MigrateTo applies the migrations up to and including version target (tests use it to
// build an older catalog and upgrade it).
//
// Concurrent inits serialize on the version table's EXCLUSIVE lock, which only roles that
// may write the table take (its owner, workers): an advisory lock, which any role that may
// connect can hold for as long as it likes, would let anyone stop every init and upgrade.
// Each migration runs in a transaction of its own that takes the lock, reads the version
// under it and applies the next migration, if it is still due.
func (c *Catalog) MigrateTo(ctx context.Context, target int) ([]int, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if err := ensureSchema(ctx, conn.Conn()); err != nil {
		return nil, err
	}
	applied := []int{}
	wait := c.InitLockWait
	if wait <= 0 {
		wait = DefaultInitLockWait
	}
	var waitingSince time.Time
	for {
		var done bool
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `LOCK TABLE deckhand.schema_migration IN EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			// Another init holds the version table for its migration alone; the locks a
			// migration takes on the other tables, any catalog role may hold (ACCESS SHARE,
			// by reading a view in a transaction it keeps open).
			if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', '`+migrationLockWait+`', true)`); err != nil {
				return err
			}
			var current int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM deckhand.schema_migration`).Scan(&current); err != nil {
				return err
			}
			if latest := ms[len(ms)-1].version; current > latest {
				return fmt.Errorf("catalog schema is version %d, newer than this deckhand (%d): upgrade deckhand", current, latest)
			}
			next := nextMigration(ms, current, target)
			if next == nil {
				done = true
				return nil
			}
			if _, err := tx.Exec(ctx, next.sql); err != nil {
				return fmt.Errorf("migration %s: %w", next.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO deckhand.schema_migration (version, name) VALUES ($1, $2)`, next.version, next.name); err != nil {
				return fmt.Errorf("migration %s: %w", next.name, err)
			}
			applied = append(applied, next.version)
			return nil
		})
		if IsLockTimeout(err) && ctx.Err() == nil {
			if waitingSince.IsZero() {
				waitingSince = time.Now()
			}
			if time.Since(waitingSince) < wait {
				select {
				case <-ctx.Done():
				case <-time.After(migrationLockPause):
				}
				continue
			}
			return applied, fmt.Errorf("migrate: %w; waited %s in all for locks on the catalog's tables%s: "+
				"end those transactions (pg_terminate_backend) and run deckhand init again", err, wait, lockHolders(ctx, conn.Conn()))
		}
		if err != nil {
			return applied, fmt.Errorf("migrate: %w", err)
		}
		waitingSince = time.Time{}
		if done {
			return applied, nil
		}
	}
}

// DefaultInitLockWait is how long Migrate waits, in all, for locks on the catalog's tables
// that other sessions hold, unless Catalog.InitLockWait says otherwise.
const DefaultInitLockWait = time.Minute

// A migration waits for each lock at most migrationLockWait, then rolls back, releasing what
// it holds (and the statements queued behind its wait), and is tried again after
// migrationLockPause, until it has waited InitLockWait in all: a session that keeps a catalog
// table locked (any catalog role may, reading a view in a transaction it keeps open) must
// not stall an upgrade without end, nor, through the upgrade's own wait, everyone else.
const (
	migrationLockWait  = rowLockWait
	migrationLockPause = time.Second
)

// lockHolders names the other sessions that hold locks on the catalog's relations, for a
// migration's refusal; empty when none can be read.
func lockHolders(ctx context.Context, conn *pgx.Conn) string {
	rows, err := conn.Query(ctx, `SELECT DISTINCT l.pid, coalesce(a.usename::pg_catalog.text, '')
		FROM pg_catalog.pg_locks l
		JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) l.relation
		JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
		LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
		WHERE l.granted AND n.nspname OPERATOR(pg_catalog.=) 'deckhand'
		  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
		                                         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		  AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
		ORDER BY 1 LIMIT 11`)
	if err != nil {
		return ""
	}
	var held []string
	for rows.Next() {
		var pid *int32
		var role string
		if err := rows.Scan(&pid, &role); err != nil {
			return ""
		}
		switch {
		case len(held) == 10:
			held = append(held, "…")
		case pid == nil:
			held = append(held, "a prepared transaction")
		default:
			held = append(held, fmt.Sprintf("pid %d (role %q)", *pid, role))
		}
	}
	if rows.Err() != nil || len(held) == 0 {
		return ""
	}
	return ", held by " + strings.Join(held, ", ")
}

// nextMigration is the first migration above current up to target, nil when none is.
func nextMigration(ms []migration, current, target int) *migration {
	for i := range ms {
		if ms[i].version > current && ms[i].version <= target {
			return &ms[i]
		}
	}
	return nil
}

// ensureSchema creates the schema and its version table unless they exist, and refuses a
// schema that belongs to another role than the one running init. The schema's owner counts as
// a catalog admin and may replace any object in it, the functions workers call among them: a
// schema made beforehand by a role that may create schemas in the database (to take the
// catalog over), or by another role's init, is not one to build in. Run as another role, even a
// superuser, init would also leave objects of mixed owners, SECURITY DEFINER functions running
// as different roles among them.
//
// Two first inits at once may both find the schema (or the table) missing; the second's
// CREATE then fails on the name's uniqueness, and is tried again, finding it.
func ensureSchema(ctx context.Context, conn *pgx.Conn) error {
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Only a missing schema is created: CREATE SCHEMA takes the CREATE privilege on the
			// database even when the schema exists, and a schema made for the role by
			// another (CREATE SCHEMA deckhand AUTHORIZATION ...) needs none.
			owner, me, mine, err := schemaOwner(ctx, tx)
			if errors.Is(err, pgx.ErrNoRows) {
				if _, err := tx.Exec(ctx, `CREATE SCHEMA deckhand`); err != nil {
					return err
				}
				owner, me, mine, err = schemaOwner(ctx, tx)
			}
			if err != nil {
				return err
			}
			if !mine {
				return fmt.Errorf("the catalog's schema deckhand is owned by %s, not by %s, who runs init: run deckhand init as %s; "+
					"if %s did not create the catalog, the schema was made by someone else and must be dropped", owner, me, owner, owner)
			}
			_, err = tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS deckhand.schema_migration (
				version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
			return err
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06" || pgErr.Code == "42P07") && try < 3 {
			continue // another init created it in the meantime
		}
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		return nil
	}
}

// schemaOwner names the owner of the schema deckhand and the role running init, and says
// whether they are one role (by OID: regrole quotes the names it prints, so that the role Deck
// prints as the name of the role "Deck"); pgx.ErrNoRows when there is no such schema.
func schemaOwner(ctx context.Context, tx pgx.Tx) (owner, me string, mine bool, err error) {
	err = tx.QueryRow(ctx, `SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text, current_user::pg_catalog.text,
			n.nspowner OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)
		FROM pg_catalog.pg_namespace n WHERE n.nspname = 'deckhand'`).Scan(&owner, &me, &mine)
	return owner, me, mine, err
}
