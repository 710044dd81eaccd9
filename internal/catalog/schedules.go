package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// NewSchedule is a schedule as `deckhand schedule add` writes it. Exactly one of Cron and
// Every is set; NextRunAt is the first due time (nil: the leader computes it).
type NewSchedule struct {
	Name       string
	Spec       json.RawMessage // a job spec as `deckhand job submit` reads it, in JSON
	Cron       string
	Timezone   string
	Every      time.Duration
	SkipMissed bool
	NoOverlap  bool
	NextRunAt  *time.Time
}

// AddSchedule creates a schedule through deckhand.schedule_add, for the catalog session's
// user, who becomes its submitter for good.
func (c *Catalog) AddSchedule(ctx context.Context, s NewSchedule) (int64, error) {
	var every *string
	if s.Every > 0 {
		v := fmt.Sprintf("%d microseconds", s.Every.Microseconds())
		every = &v
	}
	var id int64
	err := c.Pool.QueryRow(ctx, `SELECT deckhand.schedule_add($1, $2::jsonb, $3, $4, $5::interval, $6, $7, $8, `+CallerSearchPathSQL+`)`,
		s.Name, string(s.Spec), nonEmpty(s.Cron), nonEmpty(s.Timezone), every, s.SkipMissed, s.NoOverlap, s.NextRunAt).Scan(&id)
	if err != nil {
		return 0, callError(err)
	}
	return id, nil
}

// PauseSchedule stops a schedule from firing until it is resumed.
func (c *Catalog) PauseSchedule(ctx context.Context, name string) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.schedule_pause($1)`, name)
	return callError(err)
}

// ResumeSchedule lets a paused schedule fire again, from next (nil: the leader computes the
// first due time after now); the due times it was paused for do not fire.
func (c *Catalog) ResumeSchedule(ctx context.Context, name string, next *time.Time) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.schedule_resume($1, $2)`, name, next)
	return callError(err)
}

// RemoveSchedule deletes a schedule and its firings; its jobs stay.
func (c *Catalog) RemoveSchedule(ctx context.Context, name string) error {
	_, err := c.Pool.Exec(ctx, `SELECT deckhand.schedule_remove($1)`, name)
	return callError(err)
}

const scheduleColumns = `id, name, submitted_by, owners, timing, cron, timezone,
	(extract(epoch FROM every) * 1000)::bigint AS every_ms, skip_missed, no_overlap, paused, spec_summary,
	next_run_at, last_due_at, last_outcome, last_error, last_job_id, last_job_state, created_at, spec`

// Schedules lists the schedules the caller may see, by name.
func (c *Catalog) Schedules(ctx context.Context) ([]deckhandtype.Schedule, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+scheduleColumns+` FROM deckhand.schedules ORDER BY name`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.Schedule])
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	return out, nil
}

// scheduleRefSQL matches rows of deckhand.schedules to a reference $1: NAME is the caller's own
// schedule, or when it has none of that name, those of others it may see; SUBMITTER/NAME
// another role's.
const scheduleRefSQL = `CASE WHEN strpos($1, '/') > 0
	THEN (submitted_by, name) = (SELECT r.submitter, r.name FROM deckhand.schedule_ref($1) r)
	ELSE name = $1 AND (submitted_by = session_user OR NOT EXISTS (SELECT 1 FROM deckhand.schedules o
		WHERE o.name = $1 AND o.submitted_by = session_user)) END`

// Schedule reads one schedule by reference: its name for the caller's own, SUBMITTER/NAME
// for another role's that the caller may see.
func (c *Catalog) Schedule(ctx context.Context, name string) (deckhandtype.Schedule, error) {
	rows, _ := c.Pool.Query(ctx, `SELECT `+scheduleColumns+` FROM deckhand.schedules WHERE `+scheduleRefSQL, name)
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[deckhandtype.Schedule])
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("schedule %s: %w", name, ErrNotFound)
	}
	if errors.Is(err, pgx.ErrTooManyRows) {
		return s, fmt.Errorf("several schedules are named %s: name one as SUBMITTER/NAME: %w", name, ErrInvalid)
	}
	if err != nil {
		return s, fmt.Errorf("read schedule %s: %w", name, err)
	}
	return s, nil
}

// ScheduleRuns lists the latest firings of a schedule, newest first, at most limit.
func (c *Catalog) ScheduleRuns(ctx context.Context, name string, limit int) ([]deckhandtype.ScheduleRun, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT schedule_id, schedule, due_at, outcome, missed, job_id, job_state, error, fired_at
		FROM deckhand.schedule_runs WHERE schedule_id = ANY (ARRAY(SELECT id FROM deckhand.schedules WHERE `+scheduleRefSQL+`))
		ORDER BY due_at DESC LIMIT $2`, name, limit)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.ScheduleRun])
	if err != nil {
		return nil, fmt.Errorf("read firings of schedule %s: %w", name, err)
	}
	return out, nil
}

// JobSchedule names the schedule that submitted a job; nil for a job submitted by hand.
func (c *Catalog) JobSchedule(ctx context.Context, jobID int64) (*deckhandtype.JobSchedule, error) {
	var s deckhandtype.JobSchedule
	err := c.Pool.QueryRow(ctx, `SELECT schedule_id, schedule, due_at FROM deckhand.job_schedules WHERE job_id = $1`, jobID).
		Scan(&s.ID, &s.Name, &s.DueAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the schedule of job %d: %w", jobID, err)
	}
	return &s, nil
}

// DueSchedule is a schedule whose next due time has come, as the leader reads it: every
// field as a hostile submitter may have written it.
type DueSchedule struct {
	ID          int64
	Name        string
	SubmittedBy string
	Spec        json.RawMessage
	Cron        string
	Timezone    string
	Every       time.Duration
	SkipMissed  bool
	NextRunAt   *time.Time // nil: not computed yet
}

// DueSchedules reads up to limit unpaused schedules due at now (or without a next due time),
// the most overdue first, but those of skip (schedules the caller could not fire just now).
func (c *Catalog) DueSchedules(ctx context.Context, now time.Time, limit int, skip []int64) ([]DueSchedule, error) {
	rows, _ := c.Pool.Query(ctx, `
		SELECT id, name, submitted_by, spec, coalesce(cron, ''), coalesce(timezone, ''),
			coalesce((extract(epoch FROM every) * 1000000)::bigint, 0), skip_missed, next_run_at
		FROM deckhand.schedule
		WHERE NOT paused AND (next_run_at IS NULL OR next_run_at <= $1) AND id <> ALL (coalesce($3::bigint[], '{}'))
		ORDER BY next_run_at NULLS FIRST LIMIT $2`, now, limit, skip)
	var out []DueSchedule
	var d DueSchedule
	var everyUS int64
	_, err := pgx.ForEachRow(rows, []any{&d.ID, &d.Name, &d.SubmittedBy, &d.Spec, &d.Cron, &d.Timezone, &everyUS, &d.SkipMissed, &d.NextRunAt},
		func() error {
			d.Every = time.Duration(everyUS) * time.Microsecond
			out = append(out, d)
			d = DueSchedule{}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read due schedules: %w", err)
	}
	return out, nil
}

// NextScheduleDue is the earliest next due time of the unpaused schedules; nil when none is due
// ever, or when one waits for its first due time to be computed (then: now).
func (c *Catalog) NextScheduleDue(ctx context.Context) (*time.Time, error) {
	var next *time.Time
	var pending bool
	err := c.Pool.QueryRow(ctx, `
		SELECT min(next_run_at) FILTER (WHERE next_run_at < 'infinity'), coalesce(bool_or(next_run_at IS NULL), false)
		FROM deckhand.schedule WHERE NOT paused`).Scan(&next, &pending)
	if err != nil {
		return nil, fmt.Errorf("read the next due schedule: %w", err)
	}
	if pending {
		t := time.Time{}
		return &t, nil
	}
	return next, nil
}

// SetScheduleStart sets the first due time of a schedule that has none yet; errText, when set,
// records why the schedule cannot fire (its timing does not parse), and next is then infinity.
// It reports whether it did: not when the schedule's row is locked, which its submitter may
// keep it for as long as it likes (deckhand.schedule_resume in a statement that goes on).
func (c *Catalog) SetScheduleStart(ctx context.Context, id int64, next time.Time, errText string) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `
		UPDATE deckhand.schedule SET next_run_at = CASE WHEN $3::text IS NULL THEN $2::timestamptz ELSE 'infinity'::timestamptz END,
			last_error = coalesce(deckhand.redact($3), last_error),
			last_outcome = CASE WHEN $3::text IS NULL THEN last_outcome ELSE 'failed' END
		WHERE id = (SELECT l.id FROM deckhand.schedule l WHERE l.id = $1 AND l.next_run_at IS NULL AND NOT l.paused
		            FOR UPDATE SKIP LOCKED)`, id, next, nonEmpty(errText))
	if err != nil {
		return false, fmt.Errorf("set the first due time of schedule %d: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// SessionContext is what a submission by this catalog session captures: the session user (the
// submitter), its search_path, and the catalog's clock.
func (c *Catalog) SessionContext(ctx context.Context) (user, searchPath string, now time.Time, err error) {
	err = c.Pool.QueryRow(ctx, `SELECT session_user, `+CallerSearchPathSQL+`, coalesce($1, now())`, c.now()).
		Scan(&user, &searchPath, &now)
	if err != nil {
		err = fmt.Errorf("read the catalog session: %w", err)
	}
	return user, searchPath, now, err
}

// infinity is a timestamp after every other, for a schedule that never fires again.
var infinity = pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}

// Firing is what the leader decided for one due time of a schedule.
type Firing struct {
	ScheduleID int64
	// Expected is the schedule's next_run_at as the leader read it: the firing applies only if
	// it is still so (no other leader fired it meanwhile, nobody paused or changed it).
	Expected time.Time
	DueAt    time.Time // the due time recorded: Expected, or the latest of a missed window
	Missed   int       // earlier due times folded into this one
	Next     time.Time // the schedule's next due time after this one (zero: never)
	// Outcome is FiringSubmitted to submit Job (if the schedule's rules allow it at commit),
	// or the reason nothing is submitted, with Err for FiringFailed.
	Outcome deckhandtype.FiringOutcome
	Job     *NewJob
	Err     string
	// Refused: Outcome is FiringFailed because the submission's checks refused the job. The
	// schedule's no-overlap rule comes first, as for a job it submits: a check may refuse the
	// job only because the schedule's previous one still runs (a move of what that job moves).
	Refused bool
}

// Fired is what a firing did; Applied is false when the due time had already been handled
// (another leader fired it, or the schedule changed), and then nothing was written.
type Fired struct {
	Applied bool
	Outcome deckhandtype.FiringOutcome
	JobID   int64
	Err     string
}

// FireSchedule handles one due time of a schedule in one transaction: the schedule row is
// locked and must still be due at f.Expected; the job (if any) is written for the schedule's
// submitter (deckhand.force_submitter takes it from the schedule); the firing is recorded;
// next_run_at moves to f.Next. Whichever leader commits first handles the due time; any
// other finds next_run_at moved and writes nothing. At commit the submitter must still be
// allowed to submit (deckhand_submitter, as deckhand.submit_job requires), and with
// no_overlap the schedule's previous job must have ended; else the firing is recorded
// failed, or skipped_overlap (also when the submission's checks refused the job, f.Refused).
// A schedule whose row is locked is not fired (Applied false): its submitter may keep it
// locked for as long as it likes (deckhand.schedule_resume, pause or remove in a statement
// or transaction that goes on), and the leader must not wait for it with every other
// schedule behind; the due time is handled once the row is free.
func (c *Catalog) FireSchedule(ctx context.Context, f Firing) (Fired, error) {
	out := Fired{Outcome: f.Outcome, Err: f.Err}
	err := pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		var submitter string
		var noOverlap, maySubmit, mayLogIn, previousRuns bool
		// A creator that may no longer log in (NOLOGIN: cut off) could not submit the job
		// itself, and its schedules submit nothing for it either.
		err := tx.QueryRow(ctx, `
			SELECT s.submitted_by, s.no_overlap, deckhand.may_submit(s.submitted_by),
				coalesce((SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.rolname = s.submitted_by), false),
				EXISTS (SELECT 1 FROM deckhand.job j WHERE j.id = s.last_job_id
				        AND j.state NOT IN ('finished', 'failed', 'cancelled'))
			FROM deckhand.schedule s
			WHERE s.id = $1 AND s.next_run_at = $2 AND NOT s.paused
			FOR UPDATE OF s SKIP LOCKED`, f.ScheduleID, f.Expected).Scan(&submitter, &noOverlap, &maySubmit, &mayLogIn, &previousRuns)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		out.Applied = true
		if noOverlap && previousRuns && (out.Outcome == deckhandtype.FiringSubmitted || f.Refused) {
			out.Outcome, out.Err = deckhandtype.FiringSkippedOverlap, ""
		}
		if out.Outcome == deckhandtype.FiringSubmitted {
			switch {
			case !maySubmit:
				out.Outcome = deckhandtype.FiringFailed
				out.Err = fmt.Sprintf("%s may not submit jobs: an admin can GRANT deckhand_submitter TO %s",
					submitter, pgx.Identifier{submitter}.Sanitize())
			case !mayLogIn:
				out.Outcome = deckhandtype.FiringFailed
				out.Err = fmt.Sprintf("%s may not log in to the catalog: its schedules submit nothing until an admin runs ALTER ROLE %s LOGIN",
					submitter, pgx.Identifier{submitter}.Sanitize())
			case f.Job == nil:
				return errors.New("a firing that submits needs a job")
			default:
				// A job the catalog refuses (a constraint, a name the spec repeats) fails the
				// firing, not the leader's pass.
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				id, err := insertScheduledJob(ctx, sp, f.ScheduleID, *f.Job)
				if err == nil {
					if err := sp.Commit(ctx); err != nil {
						return err
					}
					out.JobID = id
					break
				}
				// A lost connection fails the rollback too, and so the whole firing.
				if rbErr := sp.Rollback(ctx); rbErr != nil {
					return errors.Join(err, rbErr)
				}
				// A row the job's moves are admitted on, held by another transaction of the
				// schedule's submitter (deckhand.admit_moves waits for it 2 s): no refusal, the
				// due time is tried again once the row is free.
				if IsLockTimeout(err) {
					return err
				}
				out.Outcome, out.Err = deckhandtype.FiringFailed, "submit: "+err.Error()
			}
		}
		var jobID *int64
		if out.JobID != 0 {
			jobID = &out.JobID
		}
		var next any = f.Next
		if f.Next.IsZero() {
			next = infinity
		}
		_, err = tx.Exec(ctx, `
			WITH run AS (
				INSERT INTO deckhand.schedule_run (schedule_id, due_at, outcome, missed, job_id, error, fired_at)
				VALUES ($1, $2, $3, $4, $5, deckhand.redact($6), coalesce($8, now()))
			)
			UPDATE deckhand.schedule SET next_run_at = $7, last_due_at = $2, last_outcome = $3,
				last_error = deckhand.redact($6), last_job_id = coalesce($5, last_job_id)
			WHERE id = $1`,
			f.ScheduleID, f.DueAt, string(out.Outcome), f.Missed, jobID, nonEmpty(ClipText(out.Err)), next, c.now())
		return err
	})
	if err != nil {
		return Fired{}, fmt.Errorf("fire schedule %d for %s: %w", f.ScheduleID, f.DueAt.Format(time.RFC3339), err)
	}
	return out, nil
}

// insertScheduledJob writes a schedule's job and its tasks; the job's submitter is the
// schedule's (deckhand.force_submitter). Tasks must be in dependency order.
func insertScheduledJob(ctx context.Context, tx pgx.Tx, scheduleID int64, j NewJob) (int64, error) {
	settings := j.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	owners := map[string]bool{}
	var ownerList []string
	for _, t := range j.Tasks {
		if !owners[t.Owner] {
			owners[t.Owner] = true
			ownerList = append(ownerList, t.Owner)
		}
	}
	var id int64
	err := tx.QueryRow(ctx, `
		INSERT INTO deckhand.job (description, kind, search_path, settings, tasks_total, owners, schedule_id, key, priority)
		VALUES (deckhand.redact($1), $2, $3, $4, $5, ARRAY(SELECT DISTINCT o FROM unnest($6::text[]) o ORDER BY 1), $7, $8, $9)
		RETURNING id`, j.Description, j.Kind, j.SearchPath, settings, len(j.Tasks), ownerList, scheduleID, nonEmpty(j.Key), j.Priority).Scan(&id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName == "job_key_idx" {
		return 0, fmt.Errorf("key %q is held by an unfinished job of the schedule's submitter", j.Key)
	}
	if err != nil {
		return 0, err
	}
	if _, err := insertTasks(ctx, tx, id, 0, j.Tasks); err != nil {
		// deckhand.admit_moves refuses a move of what another live job moves, in its own words.
		return 0, callError(err)
	}
	return id, nil
}

// RetainScheduleRuns deletes the firings recorded before cutoff, but each schedule's latest.
func (c *Catalog) RetainScheduleRuns(ctx context.Context, cutoff time.Time) error {
	_, err := c.Pool.Exec(ctx, `
		DELETE FROM deckhand.schedule_run r WHERE r.fired_at < $1
		AND r.due_at < (SELECT max(l.due_at) FROM deckhand.schedule_run l WHERE l.schedule_id = r.schedule_id)`, cutoff)
	if err != nil {
		return fmt.Errorf("delete old schedule firings: %w", err)
	}
	return nil
}
