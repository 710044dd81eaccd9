package catalog_test

import (
	"context"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A task whose row a caller of deckhand.pause or cancel keeps locked (the caller's statement
// or transaction goes on as long as it likes) holds back no other task's progress: the
// worker records the others' at once, and that one's at a later sample.
func TestAttackHeldTaskRowHoldsBackNoOtherProgress(t *testing.T) {
	cat := migratedCatalog(t)
	job := catalog.NewJob{Description: "two", Kind: "noop", Tasks: []catalog.NewTask{
		{Name: "held", Kind: "noop", Owner: "app", MaxAttempts: 1, Timeout: time.Hour},
		{Name: "other", Kind: "noop", Owner: "app", MaxAttempts: 1, Timeout: time.Hour}}}
	if _, err := cat.InsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 2, 'infinity')`); err != nil {
		t.Fatal(err)
	}
	claimed, err := cat.Claim(ctx, 1, 2)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claimed %+v (%v)", claimed, err)
	}
	tx, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT FROM deckhand.task WHERE id = $1 FOR UPDATE`, claimed[0].ID); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p := &deckhandtype.TaskProgress{Command: "CREATE INDEX", Done: 1, Total: 2, Unit: "blocks"}
	if err := cat.RecordProgress(rctx, []catalog.ProgressSample{
		{TaskID: claimed[0].ID, Token: claimed[0].Token, Progress: p},
		{TaskID: claimed[1].ID, Token: claimed[1].Token, Progress: p}}); err != nil {
		t.Fatalf("recording progress beside a held row: %v", err)
	}
	got, err := cat.TaskProgress(ctx, []int64{claimed[1].ID})
	if err != nil || got[claimed[1].ID] == nil {
		t.Errorf("the other task's progress: %+v, %v", got, err)
	}
}
