package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// exclusiveKind is a kind whose submission check refuses a task while another of its kind
// has not ended, as a move's refuses a move of what a live job moves.
func exclusiveKind() engine.Feature {
	return engine.Feature{Name: "exclusive", Kinds: []engine.Kind{{Name: "exclusive",
		Validate: func(json.RawMessage) error { return nil },
		Check: func(ctx context.Context, c *engine.Client, _ string, _ []spec.Task) error {
			var job int64
			err := c.Catalog().Pool.QueryRow(ctx, `SELECT job_id FROM deckhand.task WHERE kind = 'exclusive'
				AND state NOT IN ('done', 'failed', 'cancelled', 'unscheduled') LIMIT 1`).Scan(&job)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			return spec.Invalidf("job %d is already at it", job)
		},
		New: func(engine.Deps) engine.Executor {
			return engine.ExecutorFunc(func(context.Context, *deckhandtype.ClaimedTask) error { return nil })
		}}}}
}

// --no-overlap skips a due time while the schedule's previous job has not ended. A kind's
// submission check that refuses the job because that very job still runs (a move's "already
// being moved by job N") must not turn the skip into a failed firing: the schedule's own rule
// says what a due time during its previous job does.
func TestNoOverlapSkipsBeforeAKindCheckRefuses(t *testing.T) {
	e := testenv.New(t, exclusiveKind())
	clock := &fakeClock{}
	s := service(t, e, clock)
	first := time.Date(2026, 7, 1, 2, 0, 0, 0, time.UTC)
	if _, err := e.Client.Catalog().AddSchedule(ctx, catalog.NewSchedule{Name: "excl",
		Spec:  []byte(`{"description": "exclusive", "tasks": [{"name": "t", "kind": "exclusive"}]}`),
		Every: time.Minute, NoOverlap: true, NextRunAt: &first}); err != nil {
		t.Fatal(err)
	}
	clock.Set(first.Add(time.Second))
	fireDue(t, s) // no worker: its job stays unfinished
	clock.Set(first.Add(time.Minute + time.Second))
	fireDue(t, s)
	rs := runs(t, e, "excl")
	if len(rs) != 2 || rs[0].Outcome != deckhandtype.FiringSubmitted {
		t.Fatalf("firings %+v, want a submitted one and another", rs)
	}
	if r := rs[1]; r.Outcome != deckhandtype.FiringSkippedOverlap || r.Error != nil {
		t.Errorf("the due time during the previous job: %s (%v), want skipped_overlap", r.Outcome, deref(r.Error))
	}
}
