package catalog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// moveJob is a job of one move task named name, of schema s or, with tables, of those tables
// of it, written as package move writes it.
func moveJob(t *testing.T, name, s string, tables ...string) catalog.NewJob {
	t.Helper()
	payload := map[string]any{"from": "g1", "to": "g2"}
	if len(tables) == 0 {
		payload["schema"] = s
	} else {
		var pairs [][2]string
		for _, tbl := range tables {
			pairs = append(pairs, [2]string{s, tbl})
		}
		payload["tables"] = pairs
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return catalog.NewJob{Description: "move", Kind: "move", Tasks: []catalog.NewTask{{
		Name: name, Kind: "move", Payload: raw, MaxAttempts: 1, Timeout: time.Hour, InTransaction: true}}}
}

func heldBy(task, object string, job int64) string {
	return fmt.Sprintf(`task %q: %s is already being moved by job %d`, task, object, job)
}

// The catalog itself admits one job per moved object, whatever checked the job before: a
// submission (deckhand.submit_job) and a schedule's firing (FireSchedule) that write moves of
// one schema at the same moment, each having seen no other, write one job; the other is
// refused with the submission check's line. Nothing of the refused one is written.
func TestCatalogAdmitsOneMoveOfAnObject(t *testing.T) {
	cat := migratedCatalog(t)
	due := time.Date(2026, 7, 1, 3, 0, 0, 0, time.UTC)
	for round := range 12 {
		s := fmt.Sprintf("tenant_%d", round)
		schedule, err := cat.AddSchedule(ctx, catalog.NewSchedule{Name: "moves_" + s, Every: time.Hour, NextRunAt: &due,
			Spec: []byte(`{"tasks": [{"name": "n", "kind": "noop"}]}`)})
		if err != nil {
			t.Fatal(err)
		}
		submitted, scheduled := moveJob(t, "move", s), moveJob(t, "scheduled", s, "orders")
		var id int64
		var submitErr, fireErr error
		var fired catalog.Fired
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			id, submitErr = cat.InsertJob(ctx, submitted)
		}()
		go func() {
			defer wg.Done()
			<-start
			fired, fireErr = cat.FireSchedule(ctx, catalog.Firing{ScheduleID: schedule, Expected: due, DueAt: due,
				Next: due.Add(time.Hour), Outcome: FiringSubmitted, Job: &scheduled})
		}()
		close(start)
		wg.Wait()
		if fireErr != nil || !fired.Applied {
			t.Fatalf("round %d: firing %+v, %v", round, fired, fireErr)
		}
		switch {
		case submitErr == nil && fired.Outcome == FiringFailed:
			if want := "submit: " + heldBy("scheduled", "table "+s+".orders", id); fired.Err != want {
				t.Errorf("round %d: the firing failed with %q, want %q", round, fired.Err, want)
			}
		case submitErr != nil && fired.Outcome == FiringSubmitted:
			if want := heldBy("move", "schema "+s, fired.JobID); submitErr.Error() != want || !errors.Is(submitErr, catalog.ErrInvalid) {
				t.Errorf("round %d: the submission was refused with %q, want bad input, %q", round, submitErr, want)
			}
		default:
			t.Errorf("round %d: submission = job %d, %v; firing = %s job %d %q; want one job", round, id, submitErr,
				fired.Outcome, fired.JobID, fired.Err)
		}
		var jobs, tasks int
		if err := cat.Pool.QueryRow(ctx, `SELECT count(DISTINCT job_id), count(*) FROM deckhand.task
			WHERE kind = 'move' AND (payload ->> 'schema' = $1 OR payload -> 'tables' -> 0 ->> 0 = $1)`, s).Scan(&jobs, &tasks); err != nil ||
			jobs != 1 || tasks != 1 {
			t.Errorf("round %d: %d jobs, %d tasks move %s (%v); want 1", round, jobs, tasks, s, err)
		}
	}
}

// What a live job holds: its moves that have not ended, begun or not, and its marks; a job may
// move a schema and back. A move that has ended, or whose job has, holds nothing.
func TestLiveMovesHoldTheirObjects(t *testing.T) {
	cat := migratedCatalog(t)
	insert := func(j catalog.NewJob) int64 {
		t.Helper()
		id, err := cat.InsertJob(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	refused := func(j catalog.NewJob, want string) {
		t.Helper()
		if id, err := cat.InsertJob(ctx, j); err == nil || err.Error() != want || !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("job %d, %v; want refused with %q", id, err, want)
		}
	}
	tables := insert(moveJob(t, "m", "app", "orders", "items"))
	refused(moveJob(t, "whole", "app"), heldBy("whole", "schema app", tables))
	refused(moveJob(t, "one", "app", "users", "items"), heldBy("one", "table app.items", tables))
	users := insert(moveJob(t, "other", "app", "users"))

	// A round trip in one job.
	trip := moveJob(t, "there", "crm")
	back := moveJob(t, "back", "crm").Tasks[0]
	back.DependsOn = []string{"there"}
	trip.Tasks = append(trip.Tasks, back)
	roundTrip := insert(trip)
	refused(moveJob(t, `"odd" \name`, "crm", "t"), heldBy(`"odd" \name`, "table crm.t", roundTrip))

	// Cancelled, the job holds nothing; a mark of a live job holds its object.
	if _, err := cat.CancelJob(ctx, roundTrip); err != nil {
		t.Fatal(err)
	}
	later := insert(moveJob(t, "later", "crm"))
	if _, err := cat.CancelJob(ctx, later); err != nil {
		t.Fatal(err)
	}
	marker := insert(catalog.NewJob{Kind: "noop", Tasks: []catalog.NewTask{{Name: "n", Kind: "noop", MaxAttempts: 1, Timeout: time.Hour}}})
	if err := cat.BeginMove(ctx, marker, []PlacedObject{{Schema: "crm", Table: "t"}}, "g1", "g2"); err != nil {
		t.Fatal(err)
	}
	refused(moveJob(t, "whole", "crm"), heldBy("whole", "schema crm", marker))

	live, err := cat.LiveMoves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range live {
		got = append(got, fmt.Sprintf("%s.%s:%d", m.Schema, deref(m.Table), m.JobID))
	}
	if want := fmt.Sprintf("app.items:%d app.orders:%d app.users:%d crm.t:%d", tables, tables, users, marker); strings.Join(got, " ") != want {
		t.Errorf("live moves %q, want %q", strings.Join(got, " "), want)
	}
}

// A submission whose snapshot predates another's admission of a move of the same schema (a
// REPEATABLE READ transaction begun before it) cannot see it: it fails with a serialization
// failure rather than being admitted beside it.
func TestOlderSnapshotCannotAdmitASecondMove(t *testing.T) {
	cat := migratedCatalog(t)
	tx, err := cat.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// The transaction's snapshot is taken now, before the first move is written.
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.InsertJob(ctx, moveJob(t, "first", "app")); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(map[string]any{"kind": "move", "tasks": []any{map[string]any{
		"name": "second", "kind": "move", "payload": map[string]any{"schema": "app", "from": "g1", "to": "g2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	err = tx.QueryRow(ctx, `SELECT deckhand.submit_job($1::jsonb)`, spec).Scan(&id)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Errorf("the second submission = job %d, %v; want a serialization failure", id, err)
	}
}
