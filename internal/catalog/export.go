package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Refusals of CreateExport, matched with errors.Is; the error's text is the catalog's message.
var (
	// ErrExportExists refuses a second export to a destination that has one (unless forced).
	ErrExportExists = errors.New("destination already has an export")
)

// NewExport describes an export to start. Names and the destination are in their normal form
// (package export normalizes them); the catalog re-checks the destination.
type NewExport struct {
	SourceTable string
	Partition   string
	Group       string
	Primary     string // node of the group the coordinator runs on
	Owner       string // role the export reads as; empty: the submitter
	Destination string
	Compression string
	PartSize    int64
	Force       bool
	MaxAttempts int
	Timeout     time.Duration
}

const exportColumns = `id, job_id, source_table, partition, node_group, destination, state, parts_total, parts_done,
	rows, bytes, errors, consistency_lsn::text AS consistency_lsn, epoch, compression, part_size, forced, manifest_url, error,
	created_at, planned_at, finished_at, columns`

// CreateExport submits an export through deckhand.submit_export, which writes the export,
// its job and the job's coordinator task in one transaction, as the session user. It refuses
// (ErrInvalid, ErrForbidden) what the submitter may not do, and (ErrExportExists, unless e.Force) a
// destination that already has an export.
func (c *Catalog) CreateExport(ctx context.Context, e NewExport) (exportID, jobID int64, err error) {
	err = c.Pool.QueryRow(ctx, `
		SELECT export_id, job_id FROM deckhand.submit_export(
			source_table => @source_table, partition => @partition, node_group => @node_group,
			primary_node => @primary_node, owner => @owner, destination => @destination, compression => @compression,
			part_size => @part_size, force => @force, max_attempts => @max_attempts,
			timeout => make_interval(secs => @timeout_secs))`,
		pgx.StrictNamedArgs{"source_table": e.SourceTable, "partition": e.Partition, "node_group": e.Group,
			"primary_node": e.Primary, "owner": e.Owner, "destination": e.Destination, "compression": e.Compression,
			"part_size": e.PartSize, "force": e.Force, "max_attempts": e.MaxAttempts, "timeout_secs": e.Timeout.Seconds()},
	).Scan(&exportID, &jobID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object
		return 0, 0, &refusal{pgErr.Message, ErrExportExists}
	}
	if err != nil {
		return 0, 0, callError(err)
	}
	return exportID, jobID, nil
}

// ExportRelation is the leaf an export reads, as its coordinator resolved it.
type ExportRelation struct {
	OID    uint32
	Schema string
	Name   string
}

// Identifier is the relation's quoted name.
func (r ExportRelation) Identifier() pgx.Identifier { return pgx.Identifier{r.Schema, r.Name} }

// SetExportRelation records the relation the export reads, unless one is recorded already,
// guarded by the coordinator's attempt token; it returns the recorded one. Once recorded it
// never changes: every later attempt and every part reads that OID.
func (c *Catalog) SetExportRelation(ctx context.Context, exportID, token int64, r ExportRelation) (ExportRelation, error) {
	var out ExportRelation
	err := c.Pool.QueryRow(ctx, `
		UPDATE deckhand.export e
		SET relation_oid = coalesce(e.relation_oid, @oid), relation_schema = coalesce(e.relation_schema, @schema),
		    relation_name = coalesce(e.relation_name, @name)
		FROM deckhand.task t
		WHERE e.id = @export AND t.job_id = e.job_id AND t.attempt_token = @token AND t.state = 'running'
		RETURNING e.relation_oid, e.relation_schema, e.relation_name`,
		pgx.StrictNamedArgs{"export": exportID, "token": token, "oid": r.OID, "schema": r.Schema, "name": r.Name}).
		Scan(&out.OID, &out.Schema, &out.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, ErrStaleAttempt
	}
	if err != nil {
		return out, fmt.Errorf("record the relation of export %d: %w", exportID, err)
	}
	return out, nil
}

// ExportRelationOf reads the relation an export reads; nil before its coordinator resolved it.
func (c *Catalog) ExportRelationOf(ctx context.Context, exportID int64) (*ExportRelation, error) {
	var oid *uint32
	var schema, name *string
	err := c.Pool.QueryRow(ctx, `SELECT relation_oid, relation_schema, relation_name FROM deckhand.export WHERE id = $1`,
		exportID).Scan(&oid, &schema, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("export %d: %w", exportID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the relation of export %d: %w", exportID, err)
	}
	if oid == nil || schema == nil || name == nil {
		return nil, nil
	}
	return &ExportRelation{OID: *oid, Schema: *schema, Name: *name}, nil
}

// ExportPlan is what a coordinator decided while holding the consistency point.
type ExportPlan struct {
	ExportID       int64
	CoordinatorID  int64 // task id of the coordinator
	Token          int64 // the coordinator's attempt token: the plan is refused if it is stale
	ConsistencyLSN string
	// ConsistencyTimeline is the timeline of the primary the point was taken on (0: unknown).
	ConsistencyTimeline int32
	Columns             json.RawMessage
	Parts               []ExportPart
	// Key names the object of a part in an epoch.
	Key func(epoch, part int) string
	// PartTask builds the task that exports one part, for the given epoch.
	PartTask func(epoch int, p ExportPart) NewTask
}

// ExportPart is one page range of the partition, exported to one object.
type ExportPart struct {
	Part      int     `json:"part" db:"part"`
	StartPage int64   `json:"start_page" db:"start_page"`
	EndPage   *int64  `json:"end_page" db:"end_page"` // nil: to the end
	ObjectKey string  `json:"object_key" db:"object_key"`
	Node      *string `json:"node" db:"node"`
	Rows      *int64  `json:"rows" db:"rows"`
	Bytes     *int64  `json:"bytes" db:"bytes"`
	SHA256    *string `json:"sha256" db:"sha256"`
	TaskID    *int64  `json:"task_id" db:"task_id"`
}

// ErrStaleAttempt is returned when a task's attempt token is no longer current: another
// attempt (after a rescue) owns the task now.
var ErrStaleAttempt = errors.New("attempt is no longer current")

// ErrExportCommitted is returned by PlanExport for an export that is committed (or superseded
// since): an earlier attempt of its coordinator finished it, and a committed export is never
// reopened.
var ErrExportCommitted = errors.New("export is already committed")

// PlanExport starts a new epoch of the export: it records the consistency point, the parts,
// and adds one task per part to the export's job — all guarded by the coordinator's attempt
// token. Part tasks of earlier epochs that have not ended are cancelled: what they read may
// predate a change, so only this epoch's parts can be committed. It returns the new epoch,
// or ErrExportCommitted when there is nothing left to plan.
func (c *Catalog) PlanExport(ctx context.Context, p ExportPlan) (int, error) {
	var epoch int
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var jobID int64
		err := tx.QueryRow(ctx, `
			UPDATE deckhand.export e SET epoch = e.epoch + 1, state = 'running', consistency_lsn = @lsn::pg_lsn,
				consistency_timeline = nullif(@timeline::int, 0), coordinator_token = @token, parts_total = @parts, columns = @columns, planned_at = coalesce(@now, now())
			FROM deckhand.task t
			WHERE e.id = @export AND e.state IN ('planning', 'running')
			  AND t.job_id = e.job_id AND t.attempt_token = @token AND t.state = 'running'
			RETURNING e.epoch, e.job_id`,
			pgx.StrictNamedArgs{"export": p.ExportID, "token": p.Token, "lsn": p.ConsistencyLSN, "timeline": p.ConsistencyTimeline, "parts": len(p.Parts),
				"columns": p.Columns, "now": c.now()}).Scan(&epoch, &jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			var state deckhandtype.ExportState
			err := tx.QueryRow(ctx, `SELECT state FROM deckhand.export WHERE id = $1`, p.ExportID).Scan(&state)
			if err == nil && (state == deckhandtype.ExportCommitted || state == deckhandtype.ExportSuperseded) {
				return ErrExportCommitted
			}
			return ErrStaleAttempt
		}
		if err != nil {
			return err
		}
		// Earlier epochs' unfinished parts are superseded. Task rows are locked in id order,
		// as every writer does, then the job's counter follows.
		var cancelled int
		err = tx.QueryRow(ctx, `
			WITH target AS (
				SELECT id FROM deckhand.task
				WHERE job_id = $1 AND added_by = $2 AND state IN ('blocked', 'runnable', 'running', 'paused')
				ORDER BY id FOR UPDATE
			), moved AS (
				UPDATE deckhand.task t
				SET state = CASE WHEN t.state = 'running' THEN 'cancelling' ELSE 'cancelled' END,
				    finished_at = CASE WHEN t.state = 'running' THEN NULL ELSE coalesce($3, now()) END,
				    last_error = '{"message": "superseded: the export took a new consistency point"}'
				FROM target WHERE t.id = target.id
				RETURNING t.state
			)
			SELECT count(*) FILTER (WHERE state = 'cancelled') FROM moved`, jobID, p.CoordinatorID, c.now()).Scan(&cancelled)
		if err != nil {
			return err
		}
		tasks := make([]NewTask, len(p.Parts))
		for i := range p.Parts {
			p.Parts[i].ObjectKey = p.Key(epoch, p.Parts[i].Part)
			tasks[i] = p.PartTask(epoch, p.Parts[i])
		}
		ids, err := insertTasks(ctx, tx, jobID, p.CoordinatorID, tasks)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE deckhand.job SET tasks_total = tasks_total + $2, tasks_cancelled = tasks_cancelled + $3 WHERE id = $1`,
			jobID, len(tasks), cancelled)
		if err != nil {
			return err
		}
		parts, starts, keys := make([]int32, len(p.Parts)), make([]int64, len(p.Parts)), make([]string, len(p.Parts))
		ends := make([]*int64, len(p.Parts))
		for i, part := range p.Parts {
			parts[i], starts[i], ends[i], keys[i] = int32(part.Part), part.StartPage, part.EndPage, part.ObjectKey
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO deckhand.export_part (export_id, epoch, part, start_page, end_page, object_key, task_id)
			SELECT @export, @epoch, u.part, u.start_page, u.end_page, u.object_key, u.task_id
			FROM unnest(@parts::int[], @start_pages::bigint[], @end_pages::bigint[], @object_keys::text[], @task_ids::bigint[])
				AS u(part, start_page, end_page, object_key, task_id)`,
			pgx.StrictNamedArgs{"export": p.ExportID, "epoch": epoch, "parts": parts, "start_pages": starts, "end_pages": ends,
				"object_keys": keys, "task_ids": ids})
		if err != nil {
			return err
		}
		if cancelled > 0 || len(tasks) > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, ChannelCancel)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("plan export %d: %w", p.ExportID, err)
	}
	return epoch, nil
}

// PartTaskPrefix names part tasks: the prefix plus the part number.
func PartTaskPrefix(epoch int) string { return fmt.Sprintf("part-e%d-", epoch) }

// ExportForPart reads the export and the part a part task exports.
func (c *Catalog) ExportForPart(ctx context.Context, exportID int64, epoch, part int) (*deckhandtype.Export, *ExportPart, int64, error) {
	e, err := c.Export(ctx, exportID)
	if err != nil {
		return nil, nil, 0, err
	}
	var p ExportPart
	var token int64
	err = c.Pool.QueryRow(ctx, `
		SELECT p.part, p.start_page, p.end_page, p.object_key, p.node, p.rows, p.bytes, p.sha256, p.task_id, e.coordinator_token
		FROM deckhand.export_part p JOIN deckhand.export e ON e.id = p.export_id
		WHERE p.export_id = $1 AND p.epoch = $2 AND p.part = $3`, exportID, epoch, part).
		Scan(&p.Part, &p.StartPage, &p.EndPage, &p.ObjectKey, &p.Node, &p.Rows, &p.Bytes, &p.SHA256, &p.TaskID, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, 0, fmt.Errorf("export %d part %d (epoch %d): %w", exportID, part, epoch, ErrNotFound)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return e, &p, token, nil
}

// CurrentEpoch reports the export's epoch and whether its coordinator (with that token) still
// runs: a part checks it before and after reading, since only the coordinator's lock makes
// what it reads consistent.
func (c *Catalog) CurrentEpoch(ctx context.Context, exportID, token int64) (epoch int, coordinatorAlive bool, err error) {
	err = c.Pool.QueryRow(ctx, `
		SELECT e.epoch, EXISTS (SELECT 1 FROM deckhand.task t WHERE t.job_id = e.job_id
		                         AND t.attempt_token = $2 AND t.state = 'running')
		FROM deckhand.export e WHERE e.id = $1`, exportID, token).Scan(&epoch, &coordinatorAlive)
	if err != nil {
		return 0, false, fmt.Errorf("read export %d: %w", exportID, err)
	}
	return epoch, coordinatorAlive, nil
}

// RecordExportPart stores what a part wrote. Guarded by the part task's attempt token.
func (c *Catalog) RecordExportPart(ctx context.Context, exportID int64, epoch, part int, taskToken int64, node string, rows, bytes int64, sha string) error {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.export_part p SET node = @node, rows = @rows, bytes = @bytes, sha256 = @sha256,
			finished_at = coalesce(@now, now())
		FROM deckhand.task t
		WHERE p.export_id = @export AND p.epoch = @epoch AND p.part = @part AND t.id = p.task_id AND t.attempt_token = @token
		  AND t.state = 'running'`,
		pgx.StrictNamedArgs{"export": exportID, "epoch": epoch, "part": part, "token": taskToken, "node": node,
			"rows": rows, "bytes": bytes, "sha256": sha, "now": c.now()})
	if err != nil {
		return fmt.Errorf("record export part: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleAttempt
	}
	return nil
}

// ExportProgress counts the parts of an epoch: done, ended without success, paused (their job
// is being paused), and in all.
func (c *Catalog) ExportProgress(ctx context.Context, exportID int64, epoch int) (done, failed, paused, total int, err error) {
	err = c.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE p.finished_at IS NOT NULL AND t.state = 'done'),
		       count(*) FILTER (WHERE t.state IN ('failed', 'cancelled', 'unscheduled')),
		       count(*) FILTER (WHERE t.state = 'paused'),
		       count(*)
		FROM deckhand.export_part p JOIN deckhand.task t ON t.id = p.task_id
		WHERE p.export_id = $1 AND p.epoch = $2`, exportID, epoch).Scan(&done, &failed, &paused, &total)
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("export %d progress: %w", exportID, err)
	}
	return done, failed, paused, total, nil
}

// ExportParts lists the parts of an epoch (0: the current one).
func (c *Catalog) ExportParts(ctx context.Context, exportID int64, epoch int) ([]ExportPart, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT p.part, p.start_page, p.end_page, p.object_key, p.node, p.rows, p.bytes, p.sha256, p.task_id
		FROM deckhand.export_part p JOIN deckhand.export e ON e.id = p.export_id
		WHERE p.export_id = $1 AND p.epoch = CASE WHEN $2 = 0 THEN e.epoch ELSE $2 END
		ORDER BY p.part`, exportID, epoch)
	parts, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExportPart])
	if err != nil {
		return nil, fmt.Errorf("export %d parts: %w", exportID, err)
	}
	return parts, nil
}

// CommitExport marks the export committed once its manifest is written, guarded by the
// coordinator's token and epoch, and supersedes the exports committed earlier to the same
// destination: its manifest has replaced theirs.
func (c *Catalog) CommitExport(ctx context.Context, exportID int64, epoch int, token int64, manifestURL string) error {
	return pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var dest string
		err := tx.QueryRow(ctx, `
			UPDATE deckhand.export SET state = 'committed', manifest_url = @manifest_url, finished_at = coalesce(@now, now())
			WHERE id = @export AND epoch = @epoch AND coordinator_token = @token AND state = 'running'
			RETURNING destination`,
			pgx.StrictNamedArgs{"export": exportID, "epoch": epoch, "token": token, "manifest_url": manifestURL, "now": c.now()},
		).Scan(&dest)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrStaleAttempt
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE deckhand.export SET state = 'superseded'
			WHERE destination = $1 AND id <> $2 AND state = 'committed'`, dest, exportID)
		return err
	})
}

// FailExport records why an export failed (its job's state says that it did), with anything
// that looks like a secret redacted.
func (c *Catalog) FailExport(ctx context.Context, exportID int64, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE deckhand.export SET error = deckhand.redact($2), finished_at = coalesce($3, now()) WHERE id = $1`,
		exportID, ClipText(reason), c.now())
	return err
}

// Export reads one export.
func (c *Catalog) Export(ctx context.Context, id int64) (*deckhandtype.Export, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+exportColumns+` FROM deckhand.exports WHERE id = $1`, id)
	e, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[deckhandtype.Export])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("export %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read export %d: %w", id, err)
	}
	return e, nil
}

// ExportOfJob finds the export a job runs.
func (c *Catalog) ExportOfJob(ctx context.Context, jobID int64) (*deckhandtype.Export, error) {
	var id int64
	err := c.Pool.QueryRow(ctx, `SELECT id FROM deckhand.export WHERE job_id = $1`, jobID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("export of job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return c.Export(ctx, id)
}

// Exports lists exports, newest first.
func (c *Catalog) Exports(ctx context.Context, limit int) ([]deckhandtype.Export, error) {
	if limit <= 0 {
		limit = 50
	}
	rows, _ := c.Pool.Query(ctx, `SELECT `+exportColumns+` FROM deckhand.exports ORDER BY id DESC LIMIT $1`, limit)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Export])
	if err != nil {
		return nil, fmt.Errorf("list exports: %w", err)
	}
	return out, nil
}
