package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// boundedCatalog opens a new database of the shared cluster through a fault proxy, with every
// round trip bounded as the command line bounds them and connect_timeout=1.
func boundedCatalog(t *testing.T) (*catalog.Catalog, *pgtest.Proxy) {
	t.Helper()
	pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	proxy := pgtest.ProxyTo(t, pgtest.Shared(t))
	t.Cleanup(func() { proxy.Stall(false) })
	cat, err := catalog.OpenWith(context.Background(), proxy.DSN(db, pgcluster.Superuser)+" connect_timeout=1",
		catalog.Options{BoundRoundTrips: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	return cat, proxy
}

// A statement that takes longer than the bound, on a catalog that answers, is slow, not lost:
// it runs to its end (a large submission, the cancel of a large job).
func TestBoundedRoundTripLetsASlowStatementFinish(t *testing.T) {
	t.Parallel()
	cat, _ := boundedCatalog(t)
	began := time.Now()
	if _, err := cat.Pool.Exec(context.Background(), "SELECT pg_catalog.pg_sleep(3.5)"); err != nil {
		t.Fatalf("a 3.5 s statement with a 1 s bound, the catalog answering: %v", err)
	}
	if took := time.Since(began); took < 3500*time.Millisecond {
		t.Fatalf("the statement took %s, less than it sleeps", took)
	}
}

// A statement whose catalog stops answering ends, as a timeout saying so, within a few bounds.
func TestBoundedRoundTripEndsWhenTheCatalogStopsAnswering(t *testing.T) {
	t.Parallel()
	cat, proxy := boundedCatalog(t)
	ctx := context.Background()
	if _, err := cat.Pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(true)
	began := time.Now()
	_, err := cat.Pool.Exec(ctx, "SELECT pg_catalog.pg_sleep(30)")
	took := time.Since(began)
	err = cat.NoAnswer(err)
	if !errors.Is(err, catalog.ErrNoAnswer) || !catalog.IsTimeout(err) || took > 5*time.Second {
		t.Fatalf("a statement on a stalled catalog ended after %s with %v; want ErrNoAnswer, a timeout, within 5 s", took, err)
	}
}
