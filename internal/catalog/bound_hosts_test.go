package catalog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// A conninfo naming several hosts (a catalog and its standby, a list of addresses): the
// command's connection reached the second, the first being down at the time. When a
// statement outlasted the bound, the probe asking whether its backend still ran it took the
// first host that answered, another server (or, here, one that accepts and never answers),
// and a slow statement on a catalog that answered was ended as "the catalog stopped
// answering". The probe asks the server the statement's connection reached.
func TestBoundedRoundTripProbesTheServerTheStatementRunsOn(t *testing.T) {
	t.Parallel()
	pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	proxy := pgtest.ProxyTo(t, pgtest.Shared(t))
	// The first host: nothing listens there when the catalog is opened.
	first := pgtest.FreePort(t)
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=%s user=%s sslmode=disable connect_timeout=1",
		first, proxy.Port(), db, pgcluster.Superuser)
	cat, err := catalog.OpenWith(context.Background(), dsn, catalog.Options{BoundRoundTrips: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	// Now it accepts, and never answers.
	pgtest.AcceptSilently(t, first)
	began := time.Now()
	if _, err := cat.Pool.Exec(context.Background(), "SELECT pg_catalog.pg_sleep(3.5)"); err != nil {
		t.Fatalf("a 3.5 s statement with a 1 s bound, on the host that answers, after %s: %v",
			time.Since(began).Round(time.Millisecond), err)
	}
}
