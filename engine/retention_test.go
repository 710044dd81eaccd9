package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// One leader service applies both retentions, finished jobs (catalog setting retention, else
// Config.Retention) and the cleaner's ended operations (Cleaner.Retention), with schedule and
// cutoffs on the injected clock: moving the clock is enough, nothing waits for days or hours.
func TestRetentionFollowsTheInjectedClock(t *testing.T) {
	e := testenv.New(t)
	base := time.Now().Truncate(time.Second)
	clock := &fakeClock{t: base.Add(3 * 24 * time.Hour)}
	// The lease outlasts every jump of the clock, so the leader never takes itself for dead.
	w, _ := e.Worker(engine.Config{Clock: clock, LeaseTTL: 30 * 24 * time.Hour, MaintenanceInterval: 20 * time.Millisecond})
	noop := &spec.Job{Tasks: []spec.Task{{Name: "t", Kind: spec.KindNoop}}}
	old, young := submit(t, e, noop), submit(t, e, noop)
	e.Wait(old, 10*time.Second)
	e.Wait(young, 10*time.Second)

	pool := e.Pool(e.DB)
	for id, at := range map[int64]time.Time{old: base, young: base.Add(3 * 24 * time.Hour)} {
		e.Exec(e.DB, `UPDATE deckhand.job SET finished_at = $2 WHERE id = $1`, id, at)
	}
	operation := func(job int64, endedAt time.Time) int64 {
		var id int64
		err := pool.QueryRow(ctx, `INSERT INTO deckhand.operation (job_id, owner, state, ended_at)
			VALUES ($1, 'nobody', 'succeeded', $2) RETURNING id`, job, endedAt).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldOp, youngOp := operation(old, base), operation(young, base.Add(3*24*time.Hour))
	// A destination whose exports are gone (none here) goes with the jobs' retention.
	e.Exec(e.DB, `INSERT INTO deckhand.export_destination VALUES ('file:///exported/long/ago')`)
	destinationExists := func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.export_destination`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	jobExists := func(id int64) bool {
		_, err := e.Client.JobRow(ctx, id)
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	opExists := func(id int64) bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.operation WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	testenv.Eventually(t, 10*time.Second, w.Leading, "the worker leads")

	// Seven days and an hour after base, what ended at base is past both retentions (seven
	// days each by default); what ended three days later is not.
	clock.Advance(4*24*time.Hour + time.Hour)
	testenv.Eventually(t, 10*time.Second, func() bool { return !jobExists(old) && !opExists(oldOp) && !destinationExists() },
		"the job and the cleanup operation that ended seven days ago, and the unused export destination, are deleted")
	if !jobExists(young) || !opExists(youngOp) {
		t.Fatalf("what ended four days ago was deleted: job %v, operation %v", jobExists(young), opExists(youngOp))
	}

	// The catalog setting shortens the jobs' retention only; two minutes on the clock make the
	// job retention due again.
	if err := e.Client.SetSetting(ctx, "retention", "72h"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	testenv.Eventually(t, 10*time.Second, func() bool { return !jobExists(young) }, "the job older than the retention setting is deleted")
	if !opExists(youngOp) {
		t.Error("the cleanup operation that ended four days ago was deleted: the jobs' retention setting applied to it")
	}
}
