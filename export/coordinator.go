package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gocloud.dev/blob"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/export/parquetcopy"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// Coordinator runs the "export" task: plan, hold the consistency point, commit.
type Coordinator struct {
	Catalog *catalog.Catalog
	Pools   *nodeconn.Pools
	// Poll is how often it checks the parts' progress (default 100 ms).
	Poll time.Duration
	// Cleaner registers the export's files for removal should the export fail, before any is
	// written, and pins the partition while the export runs.
	Cleaner *cleanup.Cleaner
}

func (c Coordinator) Run(ctx context.Context, t *deckhandtype.ClaimedTask) error {
	e, err := c.Catalog.ExportOfJob(ctx, t.JobID)
	if err != nil {
		return taskerr.Permanent(err)
	}
	err = c.run(ctx, t, e)
	if err != nil && !taskerr.Retryable(err) && ctx.Err() == nil {
		c.Catalog.FailExport(context.WithoutCancel(ctx), e.ID, taskerr.Describe(err).String()) //nolint:errcheck
	}
	return err
}

func (c Coordinator) run(ctx context.Context, t *deckhandtype.ClaimedTask, e *deckhandtype.Export) error {
	if _, err := parseNormal(e.Destination); err != nil {
		return taskerr.Permanent(err)
	}
	if err := c.followPrimary(ctx, t, e); err != nil {
		return err
	}
	conn, err := c.session(ctx, t)
	if err != nil {
		return err
	}
	defer endSession(ctx, conn)
	rel, err := c.relation(ctx, conn, t, e)
	if err != nil {
		return err
	}
	// Whatever the catalog says, the store decides whether an export is there already.
	ours := ownManifest(e)
	if !e.Forced {
		if err := checkDestinationFree(ctx, e.Destination, ours); err != nil {
			return err
		}
	}

	// Take and hold the consistency point. A short lock_timeout: writers queue behind a
	// waiting SHARE lock, so never wait long for it; retry later instead.
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, setLockTimeoutSQL, strconv.Itoa(int(lockTimeout.Milliseconds()))); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LOCK TABLE ONLY "+rel.Identifier().Sanitize()+" IN SHARE MODE"); err != nil {
		return fmt.Errorf("lock %s to hold the consistency point: %w", e.Partition, err)
	}
	if _, err := conn.Exec(ctx, setLockTimeoutSQL, "0"); err != nil {
		return err
	}
	// Locked by name: make sure the name still was the OID when the lock was granted. From now
	// on nobody can rename or drop it.
	if err := sameRelation(ctx, conn, rel, *t.Node); err != nil {
		return err
	}
	// Read under the lock, the columns cannot change before the parts read them.
	cols, err := parquetcopy.ColumnsOf(ctx, conn.PgConn(), rel.OID)
	if err != nil {
		return err
	}
	if err := parquetcopy.CheckSupported(cols); err != nil {
		return taskerr.Permanent(fmt.Errorf("%s: %w", e.Partition, err))
	}
	colsJSON, err := json.Marshal(cols)
	if err != nil {
		return err
	}
	var lsn, walFile string
	var pages int64
	if err := conn.QueryRow(ctx, pointSQL, rel.OID).Scan(&lsn, &pages, &walFile); err != nil {
		return err
	}
	timeline, err := nodeconn.TimelineOfWALFile(walFile)
	if err != nil {
		return err
	}

	prefix := fmt.Sprintf("export-%d/", e.ID)
	if err := c.protect(ctx, t, e, rel, prefix); err != nil {
		return err
	}
	parts := planParts(pages, e.PartSize)
	epoch, err := c.Catalog.PlanExport(ctx, catalog.ExportPlan{
		ExportID: e.ID, CoordinatorID: t.ID, Token: t.Token, ConsistencyLSN: lsn, ConsistencyTimeline: timeline,
		Columns: colsJSON, Parts: parts,
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
	if errors.Is(err, catalog.ErrExportCommitted) {
		return nil // an earlier attempt committed it, then was lost before its task could say so
	}
	if errors.Is(err, catalog.ErrStaleAttempt) {
		return taskerr.Permanent(err)
	}
	if err != nil {
		return err
	}

	if err := c.waitForParts(ctx, conn, t, e, epoch, lsn); err != nil {
		return err
	}
	return c.commit(ctx, conn, t, e, epoch, lsn, pages, cols, ours)
}

// session opens the coordinator's session on the primary: the owner's, once the node
// confirmed that the job's submitter may act as the owner. It ends with the task, never handed
// back to the pool mid-transaction. Its search_path is pinned to pg_catalog, and its
// application_name lets the leader find and terminate it should this worker die.
func (c Coordinator) session(ctx context.Context, t *deckhandtype.ClaimedTask) (*pgx.Conn, error) {
	owner, err := nodeconn.TaskOwner(t)
	if err != nil {
		return nil, err
	}
	pooled, err := c.Pools.OwnerConn(ctx, owner)
	if err != nil {
		return nil, err
	}
	conn := pooled.Hijack()
	_, err = conn.Exec(ctx, pinSearchPathSQL, false)
	if err == nil {
		_, err = conn.Exec(ctx, `SELECT pg_catalog.set_config('application_name'::pg_catalog.text, $1::pg_catalog.text, false)`,
			nodeconn.ApplicationName(t.ID, t.Token))
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
		return nil, err
	}
	return conn, nil
}

// relation is the leaf the export reads: resolved by name and recorded on the first attempt,
// the recorded OID checked on every later one.
func (c Coordinator) relation(ctx context.Context, conn *pgx.Conn, t *deckhandtype.ClaimedTask, e *deckhandtype.Export) (catalog.ExportRelation, error) {
	recorded, err := c.Catalog.ExportRelationOf(ctx, e.ID)
	if err != nil {
		return catalog.ExportRelation{}, err
	}
	rel, err := resolveRelation(ctx, conn, e, recorded, *t.Node)
	if err != nil || recorded != nil {
		return rel, err
	}
	stored, err := c.Catalog.SetExportRelation(ctx, e.ID, t.Token, rel)
	if errors.Is(err, catalog.ErrStaleAttempt) {
		return rel, taskerr.Permanent(err)
	}
	if err == nil && stored != rel {
		err = taskerr.Permanent(fmt.Errorf("export %d already reads another relation (OID %d)", e.ID, stored.OID))
	}
	return rel, err
}

// ownManifest recognises a manifest this export wrote in an earlier attempt (which lost its
// session after writing it): only an export that planned before can have written one.
func ownManifest(e *deckhandtype.Export) func(Manifest) bool {
	return func(m Manifest) bool {
		return e.Epoch > 0 && m.ExportID == e.ID && m.Source.Partition == e.Partition && m.Source.Group == e.Group
	}
}

// protect registers, in the job-wide cleanup operation, the export's directory (removed if the
// export's job fails or is cancelled, forgotten when it finishes) and pins the partition so
// that nothing deckhand runs drops it meanwhile.
func (c Coordinator) protect(ctx context.Context, t *deckhandtype.ClaimedTask, e *deckhandtype.Export, rel catalog.ExportRelation, prefix string) error {
	if c.Cleaner == nil {
		return nil
	}
	op, err := c.Cleaner.BeginJob(ctx, t.JobID, t.Owner, fmt.Sprintf("export %d of %s", e.ID, e.Partition))
	if err != nil {
		return err
	}
	bucketURL, keyPrefix, err := BucketAndPrefix(e.Destination)
	if err != nil {
		return taskerr.Permanent(err)
	}
	_, err = op.Register(ctx, cleanup.Prefix(bucketURL, keyPrefix+prefix), cleanup.OnFailure)
	var busy *catalog.ResourceBusyError
	if errors.As(err, &busy) && busy.OperationID == op.ID() {
		err = nil // registered by an earlier attempt of this coordinator
	}
	if err != nil {
		return err
	}
	_, err = op.Pin(ctx, cleanup.Table(*t.Node, rel.Schema, rel.Name), fmt.Sprintf("exported by export %d", e.ID))
	return err
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
//
// Once the job is being paused and none of its parts runs any more, the coordinator has its
// attempt released, as a pause --now would: waiting on paused parts, it would only hold the
// lock, and so the partition's writers, until the resume. The lock goes with the attempt;
// after the resume the next attempt takes a new consistency point (epoch + 1) and every part
// is read again, as after a lost coordinator.
func (c Coordinator) waitForParts(ctx context.Context, conn *pgx.Conn, t *deckhandtype.ClaimedTask, e *deckhandtype.Export,
	epoch int, lsn string) error {
	poll := c.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	point, err := deckhandtype.ParseLSN(lsn)
	if err != nil {
		return err
	}
	behind, err := c.standbys(ctx, e.Group)
	if err != nil {
		return err
	}
	var lastPing time.Time
	for {
		done, failed, paused, total, err := c.Catalog.ExportProgress(ctx, e.ID, epoch)
		if err != nil {
			return err
		}
		if failed > 0 {
			return taskerr.Permanent(fmt.Errorf("%d of %d parts failed (see the part tasks' errors)", failed, total))
		}
		if done == total {
			return nil
		}
		// Parts are paused only while the job is: the catalog marks this attempt for release
		// once no part runs, and its worker then cancels it (ctx) with the pause as the cause.
		if paused > 0 {
			if _, err := c.Catalog.ReleaseWhilePaused(ctx, t.ID, t.Token); err != nil {
				return err
			}
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
func (c Coordinator) standbys(ctx context.Context, group string) ([]deckhandtype.Node, error) {
	nodes, err := c.Catalog.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []deckhandtype.Node
	for _, n := range nodes {
		if n.Group == group && n.Role != "primary" {
			out = append(out, n)
		}
	}
	return out, nil
}

// watchReplay probes the standbys still behind the point, records their position (which makes
// them eligible for parts once past it, and wakes the workers), and returns those still behind.
func (c Coordinator) watchReplay(ctx context.Context, behind []deckhandtype.Node, point deckhandtype.LSN) []deckhandtype.Node {
	var still []deckhandtype.Node
	caughtUp := false
	for _, n := range behind {
		role, lsn, err := nodeconn.Probe(ctx, c.Pools, n.DSN)
		if err != nil {
			still = append(still, n)
			continue
		}
		if err := c.Catalog.RecordNodeCheck(ctx, n.Name, role, lsn, nil); err != nil {
			still = append(still, n)
			continue
		}
		if at, err := deckhandtype.ParseLSN(lsn); err == nil && at >= point {
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

func (c Coordinator) commit(ctx context.Context, conn *pgx.Conn, t *deckhandtype.ClaimedTask,
	e *deckhandtype.Export, epoch int, lsn string, pages int64, cols []parquetcopy.Column, ours func(Manifest) bool) error {
	// Opened only now: the parts created the destination when they wrote to it.
	bucket, err := OpenDestination(ctx, e.Destination)
	if err != nil {
		return taskerr.Permanent(err)
	}
	defer bucket.Close()
	parts, err := c.Catalog.ExportParts(ctx, e.ID, epoch)
	if err != nil {
		return err
	}
	schema, err := parquetcopy.SchemaDescription(cols)
	if err != nil {
		return taskerr.Permanent(err)
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
	// Not json.MarshalIndent, which escapes <, > and & (LIST<INT32> as LIST\u003cINT32\u003e).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return err
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	// Still holding the point? Only then may the manifest vouch for the parts.
	if _, err := conn.Exec(ctx, "SELECT"); err != nil {
		return fmt.Errorf("the session holding the consistency point was lost: %w", err)
	}
	// A forced export replaces only exports its submitter may act on: one that held nothing
	// when it was submitted may have been retried, and committed there, meanwhile.
	if e.Forced {
		other, err := c.Catalog.ForceRefusedBy(ctx, e.ID)
		if err != nil {
			return err
		}
		if other != 0 {
			return taskerr.Permanent(fmt.Errorf("%s may not force an export over export %d, which committed at this destination "+
				"(or runs there again) after this one was submitted: only who may act on that export, or a deckhand admin, may replace it",
				t.SubmittedBy, other))
		}
	}
	// Another export may have committed there while this one ran.
	if !e.Forced {
		if err := checkDestinationFree(ctx, e.Destination, ours); err != nil {
			return err
		}
	}
	if err := bucket.WriteAll(ctx, ManifestKey, append(body, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		if permanentStorageError(err) {
			return taskerr.Permanent(fmt.Errorf("write manifest: %w", err))
		}
		return fmt.Errorf("write manifest: %w", err)
	}
	manifestURL := ManifestURL(e.Destination)
	if err := c.Catalog.CommitExport(ctx, e.ID, epoch, t.Token, manifestURL); err != nil {
		return taskerr.Permanent(err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return err
	}
	// Files of superseded epochs are listed nowhere; remove them (best effort: readers ignore
	// them anyway).
	for old := 1; old < epoch; old++ {
		deletePrefix(ctx, bucket, fmt.Sprintf("export-%d/epoch-%d/", e.ID, old))
	}
	// Nor is what a writer that died left beside the parts (a killed worker's temporary file):
	// the committed epoch's directory is left holding the manifest's files alone.
	named := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		named[f.Key] = true
	}
	deleteUnnamed(ctx, bucket, fmt.Sprintf("export-%d/epoch-%d/", e.ID, epoch), named)
	// Nor a temporary manifest that a coordinator killed while writing it left at the root
	// (_manifest.json.<hex>.tmp, file:// only). This export's own is renamed into place by now;
	// a forced export writing its manifest there at this very moment would have its write
	// fail, and write it again at its next attempt.
	deleteObjects(ctx, bucket, ManifestKey+".", func(key string) bool { return strings.HasSuffix(key, ".tmp") })
	return nil
}

// endSession rolls back the session's transaction, if one is open, before closing it: the
// server acknowledges the rollback once the lock is gone, so the lock never outlives the
// attempt's result (a job recorded paused or failed no longer holds back the partition's
// writers), which closing alone does not promise.
func endSession(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockTimeout)
	defer cancel()
	if conn.PgConn().TxStatus() != 'I' {
		conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // a lost session's transaction ends with it
	}
	conn.Close(ctx) //nolint:errcheck
}

func deletePrefix(ctx context.Context, bucket *blob.Bucket, prefix string) {
	deleteUnnamed(ctx, bucket, prefix, nil)
}

// deleteUnnamed removes the objects under prefix that keep does not name (best effort).
func deleteUnnamed(ctx context.Context, bucket *blob.Bucket, prefix string, keep map[string]bool) {
	deleteObjects(ctx, bucket, prefix, func(key string) bool { return !keep[key] })
}

// deleteObjects removes the objects under prefix whose key doomed accepts (best effort).
func deleteObjects(ctx context.Context, bucket *blob.Bucket, prefix string, doomed func(key string) bool) {
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			return
		}
		if doomed(obj.Key) {
			bucket.Delete(ctx, obj.Key) //nolint:errcheck
		}
	}
}
