package catalog_test

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// Every submission to a new destination adds a row to deckhand.export_destination, which its
// submissions lock. Once retention has removed the destination's exports with their jobs, the
// row goes too; a row a submission holds is passed over, and goes at a later round.
func TestRetentionRemovesUnusedExportDestinations(t *testing.T) {
	cat := migratedCatalog(t)
	kept := catalogtest.Export(ctx, t, cat.Pool, &catalogtest.ExportOpts{}).Destination
	for _, d := range []string{kept, "file:///gone/1", "file:///gone/2", "file:///held"} {
		if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.export_destination VALUES ($1) ON CONFLICT DO NOTHING`, d); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := cat.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT 1 FROM deckhand.export_destination WHERE destination = 'file:///held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		rows, _ := cat.Pool.Query(ctx, `SELECT destination FROM deckhand.export_destination`)
		ds, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ds)
		return ds
	}

	if n, err := cat.DeleteUnusedExportDestinations(ctx, 1); err != nil || n != 1 {
		t.Fatalf("a round of one removed %d (%v), want 1", n, err)
	}
	if n, err := cat.DeleteUnusedExportDestinations(ctx, 100); err != nil || n != 1 {
		t.Fatalf("the next round removed %d (%v), want the other unused, unheld row", n, err)
	}
	want := []string{"file:///held", kept}
	slices.Sort(want)
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("destinations left: %v, want %v", got, want)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := cat.DeleteUnusedExportDestinations(ctx, 100); err != nil || n != 1 {
		t.Fatalf("once released, the held row: removed %d (%v), want 1", n, err)
	}
	if got := left(); !slices.Equal(got, []string{kept}) {
		t.Fatalf("destinations left: %v, want only the one an export names", got)
	}
}
