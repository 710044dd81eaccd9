package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gocloud.dev/blob"

	"github.com/deckhandhq/deckhand/catalog"
	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/executor"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
)

// Coordinator runs the "export" task: plan, hold the consistency point, commit.
type Coordinator struct {
	Catalog *catalog.Catalog
	Pools   *executor.Pools
	// Poll is how often it checks the parts' progress (default 100 ms).
	Poll time.Duration
	// Cleaner registers the export's files for removal should the export fail, before any is
	// written, and pins the partition while the export runs.
	Cleaner *cleanup.Cleaner
}

func (c Coordinator) Run(ctx context.Context, t *catalog.ClaimedTask) error {
	e, err := c.Catalog.ExportOfJob(ctx, t.JobID)
	if err != nil {
		return executor.Permanent(err)
	}
	err = c.run(ctx, t, e)
	if err != nil && !executor.Retryable(err) && ctx.Err() == nil {
		c.Catalog.FailExport(context.WithoutCancel(ctx), e.ID, executor.Describe(err).String()) //nolint:errcheck
	}
	return err
}

func (c Coordinator) run(ctx context.Context, t *catalog.ClaimedTask, e *catalog.Export) error {
	if t.NodeDSN == nil {
		return executor.Permanent(errors.New("the group's primary is no longer registered"))
	}
	o, err := executor.TaskOwner(t)
	if err != nil {
		return err
	}
	pooled, err := c.Pools.OwnerConn(ctx, o)
	if err != nil {
		return err
	}
	// The lock session ends with the task: never hand it back to the pool mid-transaction.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck

	// The leader finds this session by name should our worker die, and terminates it.
	if _, err := conn.Exec(ctx, `SELECT set_config('application_name', $1, false)`,
		executor.ApplicationName(t.ID, t.Token)); err != nil {
		return err
	}
	table, err := checkSource(ctx, conn, e)
	if err != nil {
		return err
	}
	cols, err := parquetcopy.Columns(ctx, conn.PgConn(), table)
	if err != nil {
		return err
	}
	if err := parquetcopy.CheckSupported(cols); err != nil {
		return executor.Permanent(fmt.Errorf("%s: %w", e.Partition, err))
	}
	colsJSON, err := json.Marshal(cols)
	if err != nil {
		return err
	}

	// Take and hold the consistency point. A short lock_timeout: writers queue behind a
	// waiting SHARE lock, so never wait long for it; retry later instead.
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.Itoa(int(lockTimeout.Milliseconds()))); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LOCK TABLE "+table.Sanitize()+" IN SHARE MODE"); err != nil {
		return fmt.Errorf("lock %s to hold the consistency point: %w", e.Partition, err)
	}
	if _, err := conn.Exec(ctx, `SELECT set_config('lock_timeout', '0', true)`); err != nil {
		return err
	}
	var lsn string
	var pages int64
	// The point is the end of the last WAL record inserted: every commit before the lock is at
	// or before it. When that record ended a page, the insert position already points past the
	// next page's header, which no standby ever reports as replayed: step back over it.
	err = conn.QueryRow(ctx, `
		WITH p AS (
			SELECT pg_current_wal_insert_lsn() AS lsn,
			       current_setting('wal_block_size')::numeric AS block,
			       (SELECT setting::numeric * 1024 * 1024 FROM pg_settings WHERE name = 'wal_segment_size' AND unit = 'MB'
			        UNION ALL SELECT setting::numeric FROM pg_settings WHERE name = 'wal_segment_size' AND unit = 'B') AS segment
		)
		SELECT (CASE WHEN (lsn - '0/0') % segment = 40 THEN lsn - 40
		             WHEN (lsn - '0/0') % block = 24 THEN lsn - 24
		             ELSE lsn END)::text,
		       pg_relation_size($1::regclass) / current_setting('block_size')::bigint
		FROM p`, table.Sanitize()).Scan(&lsn, &pages)
	if err != nil {
		return err
	}

	prefix := fmt.Sprintf("export-%d/", e.ID)
	if err := c.protect(ctx, t, e, table, prefix); err != nil {
		return err
	}
	parts := planParts(pages, e.PartSize)
	epoch, err := c.Catalog.PlanExport(ctx, catalog.ExportPlan{
		ExportID: e.ID, CoordinatorID: t.ID, Token: t.Token, ConsistencyLSN: lsn, Columns: colsJSON, Parts: parts,
		Key: func(epoch, part int) string { return fmt.Sprintf("%sepoch-%d/part-%05d.parquet", prefix, epoch, part) },
		PartTask: func(epoch int, part catalog.ExportPart) catalog.NewTask {
			payload, _ := json.Marshal(partPayload{ExportID: e.ID, Epoch: epoch, Part: part.Part})
			return catalog.NewTask{
				Name: catalog.PartTaskPrefix(epoch) + strconv.Itoa(part.Part), Kind: KindPart,
				Group: e.Group, MinLSN: lsn, Owner: t.Owner, Payload: payload, InTransaction: true,
				MaxAttempts: t.MaxAttempts, Timeout: t.Timeout(),
			}
		},
	})
	if errors.Is(err, catalog.ErrStaleAttempt) {
		return executor.Permanent(err)
	}
	if err != nil {
		return err
	}

	if err := c.waitForParts(ctx, conn, e, epoch, lsn); err != nil {
		return err
	}
	return c.commit(ctx, conn, t, e, epoch, lsn, pages, cols)
}

// protect registers, in the job-wide cleanup operation, the export's directory (removed if the
// export's job fails or is cancelled, forgotten when it finishes) and pins the partition so
// that nothing deckhand runs drops it meanwhile.
func (c Coordinator) protect(ctx context.Context, t *catalog.ClaimedTask, e *catalog.Export, table pgx.Identifier, prefix string) error {
	if c.Cleaner == nil {
		return nil
	}
	op, err := c.Cleaner.BeginJob(ctx, t.JobID, t.Owner, fmt.Sprintf("export %d of %s", e.ID, e.Partition))
	if err != nil {
		return err
	}
	bucketURL, keyPrefix, err := BucketAndPrefix(e.Destination)
	if err != nil {
		return executor.Permanent(err)
	}
	_, err = op.Register(ctx, cleanup.Prefix(bucketURL, keyPrefix+prefix), cleanup.OnFailure)
	var busy *catalog.ResourceBusyError
	if errors.As(err, &busy) && busy.OperationID == op.ID() {
		err = nil // registered by an earlier attempt of this coordinator
	}
	if err != nil {
		return err
	}
	schema, name := "public", table[len(table)-1]
	if len(table) == 2 {
		schema = table[0]
	}
	_, err = op.Pin(ctx, cleanup.Table(*t.Node, schema, name), fmt.Sprintf("exported by export %d", e.ID))
	return err
}

// checkSource verifies what is exported: a leaf partition of the table (or the plain table
// itself), readable by the owner, on PostgreSQL 14 or later (TID range scans).
func checkSource(ctx context.Context, conn *pgx.Conn, e *catalog.Export) (pgx.Identifier, error) {
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return nil, err
	}
	if version < 140000 {
		return nil, executor.Permanent(fmt.Errorf("export needs PostgreSQL 14 or later (TID range scans); the primary runs %d", version))
	}
	var relkind string
	var isLeaf, parentIsPartitioned bool
	err := conn.QueryRow(ctx, `
		SELECT c.relkind::text,
		       EXISTS (SELECT 1 FROM pg_partition_ancestors($1::regclass) a WHERE a.relid = $2::regclass AND a.relid <> $1::regclass),
		       (SELECT p.relkind = 'p' FROM pg_class p WHERE p.oid = $2::regclass)
		FROM pg_class c WHERE c.oid = $1::regclass`, e.Partition, e.SourceTable).Scan(&relkind, &isLeaf, &parentIsPartitioned)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return nil, executor.Permanent(err)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case e.Partition == e.SourceTable && relkind == "r":
	case e.Partition == e.SourceTable:
		return nil, executor.Permanent(fmt.Errorf("%s is partitioned: name a leaf partition with --partition", e.SourceTable))
	case !parentIsPartitioned || !isLeaf:
		return nil, executor.Permanent(fmt.Errorf("%s is not a partition of %s", e.Partition, e.SourceTable))
	case relkind != "r":
		return nil, executor.Permanent(fmt.Errorf("%s is not a leaf partition (it is partitioned itself)", e.Partition))
	}
	table := identifier(e.Partition)
	// PostgreSQL's own words when the owner may not read the partition.
	if _, err := conn.Exec(ctx, "SELECT FROM "+table.Sanitize()+" LIMIT 0"); err != nil {
		return nil, executor.Permanent(err)
	}
	return table, nil
}

// identifier splits "schema.table" (as regclass prints it) into a quoted identifier.
func identifier(name string) pgx.Identifier {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return pgx.Identifier{schema, table}
	}
	return pgx.Identifier{name}
}

// planParts splits pages into ranges of about partSize bytes; the last is open-ended.
func planParts(pages, partSize int64) []catalog.ExportPart {
	per := max(partSize/8192, 1)
	n := max((pages+per-1)/per, 1)
	parts := make([]catalog.ExportPart, n)
	for i := range parts {
		parts[i] = catalog.ExportPart{Part: i, StartPage: int64(i) * per}
		if int64(i) < n-1 {
			end := int64(i+1) * per
			parts[i].EndPage = &end
		}
	}
	return parts
}

// waitForParts returns once every part of the epoch is done, or with the first failure. It
// also watches the lock session — losing it means losing the consistency point — and the
// group's standbys: each is recorded as eligible as soon as it has replayed past the point,
// rather than at the leader's next probe.
func (c Coordinator) waitForParts(ctx context.Context, conn *pgx.Conn, e *catalog.Export, epoch int, lsn string) error {
	poll := c.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	point, err := parseLSN(lsn)
	if err != nil {
		return err
	}
	behind, err := c.standbys(ctx, e.Group)
	if err != nil {
		return err
	}
	var lastPing time.Time
	for {
		done, failed, total, err := c.Catalog.ExportProgress(ctx, e.ID, epoch)
		if err != nil {
			return err
		}
		if failed > 0 {
			return executor.Permanent(fmt.Errorf("%d of %d parts failed (see the part tasks' errors)", failed, total))
		}
		if done == total {
			return nil
		}
		behind = c.watchReplay(ctx, behind, point)
		if time.Since(lastPing) > 5*time.Second {
			if _, err := conn.Exec(ctx, "SELECT"); err != nil {
				return fmt.Errorf("the session holding the consistency point was lost: %w", err)
			}
			lastPing = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// standbys lists the group's members other than its primary.
func (c Coordinator) standbys(ctx context.Context, group string) ([]catalog.Node, error) {
	nodes, err := c.Catalog.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []catalog.Node
	for _, n := range nodes {
		if n.Group == group && n.Role != "primary" {
			out = append(out, n)
		}
	}
	return out, nil
}

// watchReplay probes the standbys still behind the point, records their position (which makes
// them eligible for parts once past it, and wakes the workers), and returns those still behind.
func (c Coordinator) watchReplay(ctx context.Context, behind []catalog.Node, point uint64) []catalog.Node {
	var still []catalog.Node
	caughtUp := false
	for _, n := range behind {
		role, lsn, err := executor.Probe(ctx, c.Pools, n.DSN)
		if err != nil {
			still = append(still, n)
			continue
		}
		if err := c.Catalog.RecordNodeCheck(ctx, n.Name, role, lsn, nil); err != nil {
			still = append(still, n)
			continue
		}
		if at, err := parseLSN(lsn); err == nil && at >= point {
			caughtUp = true
			continue
		}
		still = append(still, n)
	}
	if caughtUp {
		c.Catalog.NotifyRunnable(ctx) //nolint:errcheck
	}
	return still
}

// parseLSN reads a pg_lsn such as 0/16B3748.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad LSN %q", s)
	}
	return h<<32 | l, nil
}

func (c Coordinator) commit(ctx context.Context, conn *pgx.Conn, t *catalog.ClaimedTask,
	e *catalog.Export, epoch int, lsn string, pages int64, cols []parquetcopy.Column) error {
	// Opened only now: the parts created the destination when they wrote to it.
	bucket, err := OpenDestination(ctx, e.Destination)
	if err != nil {
		return executor.Permanent(err)
	}
	defer bucket.Close()
	parts, err := c.Catalog.ExportParts(ctx, e.ID, epoch)
	if err != nil {
		return err
	}
	schema, err := parquetcopy.SchemaDescription(cols)
	if err != nil {
		return executor.Permanent(err)
	}
	m := Manifest{
		Format: "deckhand-export/1", ExportID: e.ID, ConsistencyLSN: lsn, Compression: e.Compression,
		Consistency: "SHARE lock on the partition held by the coordinator on the primary for the whole export",
		Source:      ManifestSource{Table: e.SourceTable, Partition: e.Partition, Group: e.Group, Pages: pages},
		Schema:      schema, CommittedAt: time.Now().UTC(),
	}
	for _, p := range parts {
		if p.Rows == nil || p.Bytes == nil || p.SHA256 == nil || p.Node == nil {
			return fmt.Errorf("part %d has no recorded result", p.Part)
		}
		m.Files = append(m.Files, ManifestFile{Key: p.ObjectKey, Part: p.Part, StartPage: p.StartPage, EndPage: p.EndPage,
			Rows: *p.Rows, Bytes: *p.Bytes, SHA256: *p.SHA256, Node: *p.Node})
		m.TotalRows += *p.Rows
		m.TotalBytes += *p.Bytes
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	// Still holding the point? Only then may the manifest vouch for the parts.
	if _, err := conn.Exec(ctx, "SELECT"); err != nil {
		return fmt.Errorf("the session holding the consistency point was lost: %w", err)
	}
	if err := bucket.WriteAll(ctx, ManifestKey, append(body, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		if permanentStorageError(err) {
			return executor.Permanent(fmt.Errorf("write manifest: %w", err))
		}
		return fmt.Errorf("write manifest: %w", err)
	}
	manifestURL := ManifestURL(e.Destination)
	if err := c.Catalog.CommitExport(ctx, e.ID, epoch, t.Token, manifestURL); err != nil {
		return executor.Permanent(err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return err
	}
	// Files of superseded epochs are listed nowhere; remove them (best effort: readers ignore
	// them anyway).
	for old := 1; old < epoch; old++ {
		deletePrefix(ctx, bucket, fmt.Sprintf("export-%d/epoch-%d/", e.ID, old))
	}
	return nil
}

func deletePrefix(ctx context.Context, bucket *blob.Bucket, prefix string) {
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			return
		}
		bucket.Delete(ctx, obj.Key) //nolint:errcheck
	}
}
