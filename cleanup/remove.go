package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/s3blob"   // s3:// buckets, any S3-compatible server
	"gocloud.dev/gcerrors"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// errRelationBusy reports a table or index that pg_locks shows in use before its first
// removal attempt: the cleaner waits for it without making anyone queue behind a lock request.
var errRelationBusy = errors.New("in use by other sessions")

// errSlotActive reports a replication slot that a walsender is using: it is skipped, like a
// table some query holds, and retried once it is free.
var errSlotActive = errors.New("replication slot is active")

// removeRecord tries once to remove a record's resource and says what became of the record.
func (c *Cleaner) removeRecord(ctx context.Context, rec *catalog.DueRecord, lockTimeout time.Duration) catalog.CleanupOutcome {
	if rec.PinnedBy != nil {
		// Unpinning wakes the record at once; this is only the fallback.
		return catalog.CleanupOutcome{State: deckhandtype.CleanupPinned, Error: "pinned by " + *rec.PinnedBy, Backoff: time.Minute}
	}
	if rec.Node != nil && rec.NodeDSN == nil {
		return catalog.CleanupOutcome{State: deckhandtype.CleanupNodeRemoved,
			Error: fmt.Sprintf("node %s is no longer registered: re-add it and run `deckhand cleanup retry %d`, or `deckhand cleanup forget %d`", *rec.Node, rec.ID, rec.ID)}
	}
	rctx, cancel := context.WithTimeout(ctx, orDefault(c.RemovalTimeout, 5*time.Minute))
	err := c.removeResource(rctx, rec, lockTimeout)
	cancel()
	if err == nil {
		return catalog.CleanupOutcome{State: deckhandtype.CleanupRemoved}
	}
	msg := taskerr.Describe(err).String()
	var pgErr *pgconn.PgError
	// rec.Attempts and rec.Errors count the tries before this one.
	switch {
	case taskerr.InUse(err) || errors.Is(err, errSlotActive) || errors.Is(err, errRelationBusy):
		return catalog.CleanupOutcome{State: deckhandtype.CleanupInUse, Error: msg,
			Backoff: deckhandtype.Backoff{Base: orDefault(c.InUseBackoff, time.Second), Max: time.Minute}.Delay(rec.Attempts+1, 0)}
	case errors.As(err, &pgErr) && pgErr.Code == "2BP01",
		taskerr.Retryable(err):
		// 2BP01: something still depends on it (a schema whose tables another operation has
		// yet to drop): worth retrying, but not for ever.
		maxErrors := c.MaxErrors
		if maxErrors <= 0 {
			maxErrors = 20
		}
		if rec.Errors+1 >= maxErrors {
			return catalog.CleanupOutcome{State: deckhandtype.CleanupFailed,
				Error: fmt.Sprintf("gave up after %d errors: %s", rec.Errors+1, msg)}
		}
		return catalog.CleanupOutcome{State: deckhandtype.CleanupRetrying, Error: msg,
			Backoff: deckhandtype.Backoff{Base: orDefault(c.ErrorBackoff, time.Second), Max: 5 * time.Minute}.Delay(rec.Errors+1, 0)}
	default:
		return catalog.CleanupOutcome{State: deckhandtype.CleanupFailed, Error: msg}
	}
}

// removeResource removes one resource; a resource that is already gone counts as removed.
func (c *Cleaner) removeResource(ctx context.Context, rec *catalog.DueRecord, lockTimeout time.Duration) error {
	switch rec.Type {
	case deckhandtype.ResourceObject, deckhandtype.ResourcePrefix:
		return removeBlob(ctx, rec.Type, rec.Location, rec.Name)
	}
	if rec.SubmittedBy == "" {
		// Only an operation written before submitters were recorded, or a forged one, lacks
		// it; nobody may then act as its owner.
		return taskerr.Permanent(fmt.Errorf("its operation has no recorded submitter, so nothing may act as %q for it "+
			"(remove the %s by hand, then `deckhand cleanup forget %d`): %w", rec.Owner, rec.Type, rec.ID, nodeconn.ErrRefused))
	}
	o := nodeconn.Owner{Node: *rec.Node, DSN: *rec.NodeDSN, Role: rec.Owner, Submitter: rec.SubmittedBy}
	// An unreachable node must not hold up the records of every other node for the length
	// of a TCP timeout: the record is retried later.
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	conn, err := c.Pools.OwnerConn(actx, o)
	cancel()
	if err != nil {
		return err
	}
	defer nodeconn.Release(ctx, conn)
	r := rec.Resource()
	if rec.Attempts == 0 && (r.Type == deckhandtype.ResourceTable || r.Type == deckhandtype.ResourceIndex) {
		// Later attempts come when the probe sees it free or the backoff expires (for a
		// table never seen free), and then ask for the lock, under lock_timeout.
		busy, err := RelationBusy(ctx, conn.Conn(), []string{pgx.Identifier{r.Location, r.Name}.Sanitize()})
		if err != nil {
			return err
		}
		if busy {
			return errRelationBusy
		}
	}
	return RemoveOnNode(ctx, conn.Conn(), r, lockTimeout)
}

// RemoveOnNode removes a node resource through conn, which must be connected to the node as a
// role allowed to drop it. Each statement runs in its own transaction under lockTimeout.
// A resource that does not exist counts as removed; one in use returns an error for which
// taskerr.InUse (or, for an active slot, the cleaner) reports true.
func RemoveOnNode(ctx context.Context, conn *pgx.Conn, r Resource, lockTimeout time.Duration) error {
	switch r.Type {
	case deckhandtype.ResourceTable:
		return DropInTx(ctx, conn, "DROP TABLE IF EXISTS "+pgx.Identifier{r.Location, r.Name}.Sanitize(), lockTimeout)
	case deckhandtype.ResourceIndex:
		return DropInTx(ctx, conn, "DROP INDEX IF EXISTS "+pgx.Identifier{r.Location, r.Name}.Sanitize(), lockTimeout)
	case deckhandtype.ResourceSchema:
		return DropInTx(ctx, conn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.Name}.Sanitize(), lockTimeout)
	case deckhandtype.ResourceSchemaCascade:
		return dropSchemaCascade(ctx, conn, r.Name, lockTimeout)
	case deckhandtype.ResourceFunction:
		return DropInTx(ctx, conn, "DROP FUNCTION IF EXISTS "+pgx.Identifier{r.Location, r.Name}.Sanitize()+"() CASCADE", lockTimeout)
	case deckhandtype.ResourcePublication:
		return DropInTx(ctx, conn, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{r.Name}.Sanitize(), lockTimeout)
	case deckhandtype.ResourceSubscription:
		return dropSubscription(ctx, conn, r.Name, lockTimeout)
	case deckhandtype.ResourceReplicationSlot:
		return dropSlot(ctx, conn, r.Name)
	}
	return taskerr.Permanent(fmt.Errorf("cannot remove a %s on a node", r.Type))
}

// dropSubscription disables the subscription, detaches it from its slot and drops it. Once
// detached, dropping it never contacts the publisher, which may be gone; the slot on the
// publisher is a record of its own.
func dropSubscription(ctx context.Context, conn *pgx.Conn, name string, lockTimeout time.Duration) error {
	var enabled bool
	var slot *string
	// Owner sessions have the search_path SafeSearchPath: operators are pg_catalog's.
	err := conn.QueryRow(ctx, `
		SELECT s.subenabled, s.subslotname::pg_catalog.text FROM pg_catalog.pg_subscription s
		WHERE s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
		  AND s.subname = $1::pg_catalog.text`, name).Scan(&enabled, &slot)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	id := pgx.Identifier{name}.Sanitize()
	var steps []string
	if enabled {
		steps = append(steps, "ALTER SUBSCRIPTION "+id+" DISABLE")
	}
	if slot != nil {
		steps = append(steps, "ALTER SUBSCRIPTION "+id+" SET (slot_name = NONE)")
	}
	steps = append(steps, "DROP SUBSCRIPTION IF EXISTS "+id)
	for _, stmt := range steps {
		err := DropInTx(ctx, conn, stmt, lockTimeout)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" { // dropped meanwhile
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dropSlot drops a replication slot unless a walsender is using it.
func dropSlot(ctx context.Context, conn *pgx.Conn, name string) error {
	var active bool
	var pid *int32
	err := conn.QueryRow(ctx, `
		SELECT s.active, s.active_pid FROM pg_catalog.pg_replication_slots s
		WHERE s.slot_name = $1::pg_catalog.text`, name).Scan(&active, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if active {
		if pid != nil {
			return fmt.Errorf("%w (by process %d)", errSlotActive, *pid)
		}
		return errSlotActive
	}
	_, err = conn.Exec(ctx, `SELECT pg_catalog.pg_drop_replication_slot($1::pg_catalog.name)`, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" {
		return nil
	}
	return err
}

// slotActive reports whether a walsender uses the replication slot; a missing slot is not.
func slotActive(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var active bool
	err := conn.QueryRow(ctx, `
		SELECT coalesce((SELECT s.active FROM pg_catalog.pg_replication_slots s
		                 WHERE s.slot_name = $1::pg_catalog.text), false)`, name).Scan(&active)
	return active, err
}

// removeBlob deletes one object, or every object under a prefix.
func removeBlob(ctx context.Context, typ deckhandtype.ResourceType, bucketURL, name string) error {
	b, err := blob.OpenBucket(ctx, bucketURL)
	if err != nil {
		return blobError(fmt.Errorf("open bucket %s: %w", bucketURL, err))
	}
	defer b.Close()
	if typ == deckhandtype.ResourceObject {
		if err := b.Delete(ctx, name); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return blobError(err)
		}
		return nil
	}
	it := b.List(&blob.ListOptions{Prefix: name})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			removeEmptyDirs(bucketURL, name)
			return nil
		}
		if err != nil {
			return blobError(err)
		}
		if obj.IsDir {
			continue
		}
		if err := b.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return blobError(err)
		}
	}
}

// removeEmptyDirs removes, in a file:// bucket, the directories under a prefix that names one
// (it ends with "/") once its objects are deleted: an object store has no directories, but a
// file system keeps them, and a destination would fill with empty ones. Only empty real
// directories inside the prefix's own are removed (os.Remove refuses the others; symbolic
// links are not followed), deepest first, the prefix's own last; none above it.
func removeEmptyDirs(bucketURL, prefix string) {
	u, err := url.Parse(bucketURL)
	if err != nil || u.Scheme != "file" || !strings.HasSuffix(prefix, "/") {
		return
	}
	rel := filepath.FromSlash(strings.TrimSuffix(prefix, "/"))
	if !filepath.IsLocal(rel) {
		return
	}
	// Every step from the bucket down to the prefix's directory is a real directory: a
	// symbolic link on the way would lead out of the bucket.
	top := u.Path
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		top = filepath.Join(top, part)
		if fi, err := os.Lstat(top); err != nil || !fi.IsDir() {
			return
		}
	}
	var dirs []string
	filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error { //nolint:errcheck // nothing is returned
		if err == nil && d.IsDir() { // gone, or unreadable: left as it is
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) //nolint:errcheck // a directory that is not empty stays
	}
}

// blobError makes refusals that retrying cannot fix permanent.
func blobError(err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied, gcerrors.InvalidArgument, gcerrors.Unimplemented:
		return taskerr.Permanent(err)
	}
	return err
}
