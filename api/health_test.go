package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// /healthz answers anyone, signed in or not. While the catalog does not answer it says so,
// and nothing of the catalog's whereabouts: not the role the server logs in as, its database,
// nor its host and port (the driver's connection error names them all).
func TestHealthWithTheCatalogDownNamesNothingOfIt(t *testing.T) {
	e := testenv.New(t)
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	client, err := engine.Open(ctx, proxy.DSN(e.DB, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	srv, err := api.New(api.Config{Client: client, Registry: prometheus.NewRegistry(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	proxy.Close()
	// The first request may find its connection cut; the next ones connect anew, and fail.
	for range 3 {
		res, err := http.Get(hs.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var h api.Health
		if err := json.Unmarshal(body, &h); err != nil {
			t.Fatalf("decode %q: %v", body, err)
		}
		if res.StatusCode != http.StatusServiceUnavailable || h.Status != "catalog_unreachable" || h.Error == "" {
			t.Fatalf("GET /healthz with the catalog down: %d %s", res.StatusCode, body)
		}
		for _, secret := range []string{"user=", "database=", proxy.Addr(), strconv.Itoa(proxy.Port())} {
			if strings.Contains(string(body), secret) {
				t.Errorf("GET /healthz, open to anyone, names %q of the catalog: %s", secret, body)
			}
		}
	}
}
