package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// Placements record which node group holds each tenant schema (or a table of it) and which job
// is moving it. A move calls, in order: BeginMove when it starts (it marks what it moves, one
// job at a time per object), SwitchPlacement at cut-over (the objects now live on the target),
// and EndMove with its objects if it fails before the switch. Every change is announced on
// ChannelPlacement with the highest placement version as payload (never a name: any role that
// can connect to the catalog's database can LISTEN); listeners then read deckhand.placements.
//
// Only a switch places anything. A mark of an object the catalog does not place yet is a row
// without a group (a mark alone): deckhand.placements never shows it, and EndMove deletes it,
// so a move that fails or is cancelled leaves the placements exactly as they were.
// deckhand.placement_moves (MovesUnderWay) shows every move under way, placed or not.
//
// An object conflicts with another when they are the same, or one is the whole schema of the
// other: a schema cannot be moved while a table of it is, and the other way round.

// ChannelPlacement is where placement changes are announced.
const ChannelPlacement = "deckhand_placement"

var (
	// ErrAlreadyMoving is wrapped by BeginMove's and SwitchPlacement's refusals when another
	// job that has not ended is moving one of the objects (see AlreadyMovingError).
	ErrAlreadyMoving = errors.New("already being moved")
	// ErrPlacedElsewhere: a move's source is not where the catalog places the object.
	ErrPlacedElsewhere = errors.New("placed elsewhere")
)

// AlreadyMovingError names the object and the job that is moving it.
type AlreadyMovingError struct {
	Object deckhandtype.PlacedObject // the object the other job is moving (maybe the schema of ours, or a table of it)
	JobID  int64
}

func (e *AlreadyMovingError) Error() string {
	return fmt.Sprintf("%s is being moved by job %d", e.Object, e.JobID)
}

// Unwrap makes errors.Is(err, ErrAlreadyMoving) hold.
func (e *AlreadyMovingError) Unwrap() error { return ErrAlreadyMoving }

// liveJob is true for a job id that names a job that has not ended.
const liveJob = `EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = %s AND j.state NOT IN ('finished', 'failed', 'cancelled'))`

// lockPlacements serializes the writers of placements: checks and marks of concurrent moves
// must see one another. Readers are not blocked.
func lockPlacements(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `LOCK TABLE deckhand.placement IN SHARE ROW EXCLUSIVE MODE`)
	return err
}

func checkObjects(objects []deckhandtype.PlacedObject) error {
	if len(objects) == 0 {
		return fmt.Errorf("%w: no objects", ErrInvalid)
	}
	for _, o := range objects {
		if o.Schema == "" {
			return fmt.Errorf("%w: an object without a schema", ErrInvalid)
		}
	}
	return nil
}

func tableArg(o deckhandtype.PlacedObject) *string {
	if o.Table == "" {
		return nil
	}
	return &o.Table
}

// otherMover returns the live job other than jobID moving o, its schema or a table of it.
func otherMover(ctx context.Context, tx pgx.Tx, jobID int64, o deckhandtype.PlacedObject) (*AlreadyMovingError, error) {
	var other int64
	var schema string
	var table *string
	err := tx.QueryRow(ctx, `
		SELECT p.moving_job_id, p.schema_name, p.table_name FROM deckhand.placement p
		WHERE p.schema_name = $1 AND ($2::text IS NULL OR p.table_name IS NULL OR p.table_name = $2)
		  AND p.moving_job_id <> $3 AND `+fmt.Sprintf(liveJob, "p.moving_job_id")+`
		ORDER BY p.table_name NULLS FIRST LIMIT 1`, o.Schema, tableArg(o), jobID).Scan(&other, &schema, &table)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e := &AlreadyMovingError{Object: deckhandtype.PlacedObject{Schema: schema}, JobID: other}
	if table != nil {
		e.Object.Table = *table
	}
	return e, nil
}

// BeginMove marks objects as being moved by job jobID from group from to group to. It refuses,
// with an error wrapping ErrAlreadyMoving that names the other job, when another job that has
// not ended moves one of them (or its schema, or a table of it); with one wrapping
// ErrPlacedElsewhere when the catalog places one of them (or, for a schema, a table of it)
// on a group other than from. It places nothing: an object the catalog has no placement for
// gets a mark alone, which no reader of deckhand.placements sees. Calling it again for the
// same job (a retried attempt) changes nothing, also once the job switched them to to.
func (c *Catalog) BeginMove(ctx context.Context, jobID int64, objects []deckhandtype.PlacedObject, from, to string) error {
	if err := checkObjects(objects); err != nil {
		return fmt.Errorf("begin move of job %d: %w", jobID, err)
	}
	if from == "" || to == "" || from == to {
		return fmt.Errorf("begin move of job %d: %w: from %q to %q", jobID, ErrInvalid, from, to)
	}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		if err := lockPlacements(ctx, tx); err != nil {
			return err
		}
		for _, o := range objects {
			if conflict, err := otherMover(ctx, tx, jobID, o); err != nil || conflict != nil {
				if conflict != nil {
					return conflict
				}
				return err
			}
			// Where the catalog places the object now: for a table its own row, else its
			// schema's; for a schema, its row and every table row of it.
			rows, _ := tx.Query(ctx, `
				SELECT p.table_name, p.node_group, p.job_id = $3 AND p.node_group = $4 AND p.moving_job_id IS NULL AS switched
				FROM deckhand.placement p
				WHERE p.node_group IS NOT NULL
				  AND p.schema_name = $1 AND ($2::text IS NULL OR p.table_name = $2
				      OR (p.table_name IS NULL AND NOT EXISTS (SELECT 1 FROM deckhand.placement t
				                                               WHERE t.schema_name = $1 AND t.table_name = $2
				                                                 AND t.node_group IS NOT NULL)))`,
				o.Schema, tableArg(o), jobID, to)
			type placed struct {
				Table    *string
				Group    string
				Switched bool
			}
			found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[placed])
			if err != nil {
				return err
			}
			own := false // the object's own row says this job moved it already
			for _, p := range found {
				if p.Switched && (p.Table == nil) == (o.Table == "") {
					own = true
				}
			}
			if own {
				continue
			}
			for _, p := range found {
				if p.Group != from {
					where := deckhandtype.PlacedObject{Schema: o.Schema}
					if p.Table != nil {
						where.Table = *p.Table
					}
					return fmt.Errorf("%w: %s is on group %s, not %s", ErrPlacedElsewhere, where, p.Group, from)
				}
			}
			// A placed object keeps its placement and gains the mark; any other gets a mark
			// alone (no group), which is no placement.
			_, err = tx.Exec(ctx, `
				INSERT INTO deckhand.placement AS p (schema_name, table_name, node_group, since, moving_job_id, moving_to)
				VALUES ($1, $2, NULL, coalesce($5, now()), $3, $4)
				ON CONFLICT ON CONSTRAINT placement_schema_name_table_name_key DO UPDATE
				SET moving_job_id = excluded.moving_job_id, moving_to = excluded.moving_to,
				    version = nextval('deckhand.placement_version_seq')
				WHERE p.moving_job_id IS DISTINCT FROM excluded.moving_job_id OR p.moving_to IS DISTINCT FROM excluded.moving_to`,
				o.Schema, tableArg(o), jobID, to, c.now())
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("begin move of job %d: %w", jobID, err)
	}
	return nil
}

// SwitchPlacement places objects on group to, since now, by job jobID, and clears the marks on
// them, in one transaction (a whole schema takes its tables' own rows with it). It records
// what happened — the data is on to — so it does not insist on the job's marks: an object
// with no live mark (its mark was cleared, or BeginMove never ran) is placed all the same. It
// refuses, wrapping ErrAlreadyMoving, only when another job that has not ended moves one of
// the objects (or its schema, or a table of it). Calling it again changes nothing.
func (c *Catalog) SwitchPlacement(ctx context.Context, jobID int64, objects []deckhandtype.PlacedObject, to string) error {
	if err := checkObjects(objects); err != nil {
		return fmt.Errorf("switch placement of job %d: %w", jobID, err)
	}
	if to == "" {
		return fmt.Errorf("switch placement of job %d: %w: no target group", jobID, ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		if err := lockPlacements(ctx, tx); err != nil {
			return err
		}
		for _, o := range objects {
			if conflict, err := otherMover(ctx, tx, jobID, o); err != nil || conflict != nil {
				if conflict != nil {
					return conflict
				}
				return err
			}
			_, err := tx.Exec(ctx, `
				INSERT INTO deckhand.placement AS p (schema_name, table_name, node_group, since, job_id)
				VALUES ($1, $2, $3, coalesce($5, now()), $4)
				ON CONFLICT ON CONSTRAINT placement_schema_name_table_name_key DO UPDATE
				SET node_group = excluded.node_group, since = excluded.since, job_id = excluded.job_id,
				    moving_job_id = NULL, moving_to = NULL, version = nextval('deckhand.placement_version_seq')
				WHERE p.node_group IS DISTINCT FROM excluded.node_group OR p.job_id IS DISTINCT FROM excluded.job_id
				   OR p.moving_job_id IS NOT NULL`,
				o.Schema, tableArg(o), to, jobID, c.now())
			if err != nil {
				return err
			}
			if o.Table == "" {
				// The schema took its tables with it.
				if _, err := tx.Exec(ctx, `DELETE FROM deckhand.placement WHERE schema_name = $1 AND table_name IS NOT NULL`, o.Schema); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("switch placement of job %d: %w", jobID, err)
	}
	return nil
}

// EndMove clears the marks of job jobID (a move that failed or was cancelled before its
// switch): on objects, or on everything the job marks when none are given. Its objects stay
// where they are, free for other moves: a placement keeps its group, and a mark alone goes,
// so what the catalog did not place before the move it does not place after it. A job of
// several moves (a rebalance) passes each move's objects, so that one move's failure frees
// nothing its siblings still move.
func (c *Catalog) EndMove(ctx context.Context, jobID int64, objects ...deckhandtype.PlacedObject) error {
	var schemas, tables []string // tables: "" for a whole schema
	for _, o := range objects {
		schemas, tables = append(schemas, o.Schema), append(tables, o.Table)
	}
	const mine = `moving_job_id = $1
		  AND ($2::text[] IS NULL OR (schema_name, coalesce(table_name, '')) IN (SELECT * FROM unnest($2::text[], $3::text[])))`
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM deckhand.placement WHERE node_group IS NULL AND `+mine, jobID, schemas, tables); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			UPDATE deckhand.placement SET moving_job_id = NULL, moving_to = NULL, version = nextval('deckhand.placement_version_seq')
			WHERE `+mine, jobID, schemas, tables)
		return err
	})
	if err != nil {
		return fmt.Errorf("end move of job %d: %w", jobID, err)
	}
	return nil
}

// Placements lists every placement, by schema then table (a schema's own row first).
func (c *Catalog) Placements(ctx context.Context) ([]deckhandtype.Placement, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT schema_name, table_name, node_group, since, job_id, moving_job_id, moving_to, version
		FROM deckhand.placements ORDER BY schema_name, table_name NULLS FIRST`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Placement])
	if err != nil {
		return nil, fmt.Errorf("list placements: %w", err)
	}
	return out, nil
}

// MovesUnderWay lists the moves under way (deckhand.placement_moves): every object a job that
// has not ended is moving, whether the catalog places it or not, by schema then table.
func (c *Catalog) MovesUnderWay(ctx context.Context) ([]deckhandtype.PlacementMove, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT schema_name, table_name, moving_job_id, moving_to
		FROM deckhand.placement_moves ORDER BY schema_name, table_name NULLS FIRST`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.PlacementMove])
	if err != nil {
		return nil, fmt.Errorf("list moves under way: %w", err)
	}
	return out, nil
}

// LiveMoves lists what jobs that have not ended move or are to move (deckhand.live_moves):
// the moves under way, as MovesUnderWay, and the objects of move tasks that have not begun
// (or have not ended), by schema then table. A job's moves are written only if none of their
// objects is listed here for another job: the catalog checks it again as it writes them
// (deckhand.admit_moves), so that of two submissions at the same moment one is refused.
func (c *Catalog) LiveMoves(ctx context.Context) ([]deckhandtype.PlacementMove, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT schema_name, table_name, moving_job_id, moving_to
		FROM deckhand.live_moves() ORDER BY schema_name, table_name NULLS FIRST, moving_job_id`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.PlacementMove])
	if err != nil {
		return nil, fmt.Errorf("list live moves: %w", err)
	}
	return out, nil
}
