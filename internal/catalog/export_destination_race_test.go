package catalog_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// deckhand.submit_export admits one export to a destination at a time: it locks the
// destination's row, then looks for an export there. A submitter calls it in a REPEATABLE
// READ transaction whose snapshot it took before another's export to the destination was
// committed, so that the look finds nothing; locking the row the other export wrote is what
// refuses it (a serialization failure). Retention removed the row as unused on a snapshot
// taken before the other export's commit, once that commit released it: the submission then
// made the row anew, without conflict, and was admitted beside the other export.
func TestAttackRetentionAdmitsTwoExportsToOneDestination(t *testing.T) {
	cat := migratedCatalog(t)
	node := catalogtest.Node(ctx, t, cat.Pool, &catalogtest.NodeOpts{})
	const dest = "file:///exports/raced"
	const submit = `SELECT deckhand.submit_export('public.t', 'public.t_1', $1, $1, NULL, $2)`
	// Exports elsewhere, which retention reads past before it reaches the destination.
	other := catalogtest.Export(ctx, t, cat.Pool, &catalogtest.ExportOpts{})
	if _, err := cat.Pool.Exec(ctx, `
		INSERT INTO deckhand.export (job_id, source_table, partition, node_group, destination, compression, part_size)
		SELECT $1, 'public.t', 'public.t_1', 'g', 'file:///exports/other/' || i, 'zstd', 134217728 FROM generate_series(1, 20000) i`, other.Job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.export_destination SELECT DISTINCT destination FROM deckhand.export`); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var retention sync.WaitGroup
	retention.Add(1)
	go func() {
		defer retention.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := cat.DeleteUnusedExportDestinations(ctx, 500); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); retention.Wait() }()

	for round := range 300 {
		late, err := cat.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := late.Exec(ctx, `SELECT 1`); err != nil { // its snapshot
			t.Fatal(err)
		}
		if _, err := cat.Pool.Exec(ctx, submit, node, dest); err != nil {
			t.Fatalf("round %d: the first export: %v", round, err)
		}
		// Give retention a moment to pass over the destination.
		for i := 0; i < 10; i++ {
			var kept bool
			if err := cat.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deckhand.export_destination WHERE destination = $1)`,
				dest).Scan(&kept); err != nil {
				t.Fatal(err)
			}
			if !kept {
				t.Errorf("round %d: retention removed the destination of an export", round)
				break
			}
			time.Sleep(time.Millisecond)
		}
		_, err = late.Exec(ctx, submit, node, dest)
		if err == nil {
			err = late.Commit(ctx)
		}
		late.Rollback(context.Background()) //nolint:errcheck
		var exports int
		if err := cat.Pool.QueryRow(ctx, `SELECT count(*) FROM deckhand.export WHERE destination = $1`, dest).Scan(&exports); err != nil {
			t.Fatal(err)
		}
		if exports != 1 {
			t.Fatalf("round %d: %d exports to one destination admitted (the second's error: %v), want the second refused", round, exports, err)
		}
		// Retention removes the export with its job, before the next round.
		if _, err := cat.Pool.Exec(ctx, `DELETE FROM deckhand.job WHERE id IN (SELECT job_id FROM deckhand.export WHERE destination = $1)`, dest); err != nil {
			t.Fatal(err)
		}
	}
}
